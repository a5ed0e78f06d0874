// Command profilesplit reads the stacks of a CPU profile as
// `go tool pprof -traces` prints them (on stdin) and says where the time
// went, grouped as the edge's cost is discussed (tests/profile-edge):
// net/http server, the proxy and its transport, header copies, response
// headers, the limiter's decision, decision encoding and writing, GC and
// allocation, syscalls, the scheduler, other.
//
// Each sample goes to one group. The groups of mechanism (syscalls, the
// scheduler, GC and allocation) are looked for first, anywhere in the
// stack; then the others from the leaf up, so that a header copy made by
// the proxy counts as a header copy, not as the proxy.
//
//	go tool pprof -traces BINARY cpu.pprof | profilesplit
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

type group struct {
	name string
	re   *regexp.Regexp
}

// Mechanism groups: matched anywhere in the stack, first match wins.
var mechanism = []group{
	{"syscalls", regexp.MustCompile(`^(syscall\.|internal/runtime/syscall\.|internal/syscall/unix\.|runtime\.(write1|read)$)`)},
	{"GC and allocation", regexp.MustCompile(`^runtime\.(gcBgMarkWorker|gcAssistAlloc|gcDrain|bgsweep|bgscavenge|mallocgc|newobject|makeslice|growslice|rawstring|rawbyteslice|concatstring|slicebytetostring|markroot|scanobject|gcStart|sweepone|wbBuf|bulkBarrier)`)},
	{"scheduler", regexp.MustCompile(`^runtime\.(schedule|findRunnable|park_m|goexit0|mcall|gopark|goready|ready|wakep|startm|stopm|notesleep|notewakeup|futex|netpoll|usleep|osyield|runqsteal|checkTimers|sysmon|mPark|handoffp|entersyscall|exitsyscall|selectgo|chansend|chanrecv|lock2|unlock2)`)},
}

// Functional groups: matched from the leaf up, first match wins.
var functional = []group{
	{"header copies", regexp.MustCompile(`^(net/http\.Header\.Clone|net/http/internal\.|net/http/httputil\.copyHeader|net/http\.cloneOrMakeHeader|net/textproto\.MIMEHeader\.Clone|maps\.Clone|github\.com/ratewarden/ratewarden/edge\.\(\*Limiter\)\.forward|github\.com/ratewarden/ratewarden/edge\.forwarding)`)},
	{"response headers", regexp.MustCompile(`^(github\.com/ratewarden/ratewarden/edge\.SetHeaders|net/http\.\(\*chunkWriter\)\.writeHeader|net/http\.Header\.(writeSubset|sortedKeyValues|Write)|net/http\.\(\*response\)\.WriteHeader|net/http\.\(\*extraHeader\)|net/http\.appendTime)`)},
	// edge.server: fasthttp (package edge/fastedge on fasthttp's server
	// and client).
	{"header copies", regexp.MustCompile(`^(github\.com/ratewarden/ratewarden/edge/fastedge\.(\(\*exchange\)\.forward|removeHopHeaders)|github\.com/valyala/fasthttp\.\(\*(RequestHeader|ResponseHeader)\)\.CopyTo)`)},
	{"response headers", regexp.MustCompile(`^(github\.com/ratewarden/ratewarden/edge\.AppendRateLimitValues|github\.com/ratewarden/ratewarden/edge/fastedge\.\(\*exchange\)\.setRateLimitHeaders|github\.com/valyala/fasthttp\.\(\*ResponseHeader\)\.(AppendBytes|Write|SetCanonical|serialize))`)},
	{"proxy and transport", regexp.MustCompile(`^(github\.com/valyala/fasthttp\.\(\*(HostClient|transport|clientStreamBody|clientConn)\)|github\.com/valyala/fasthttp\.\(\*Request\)\.Write|github\.com/valyala/fasthttp\.\(\*Response\)\.Read|github\.com/ratewarden/ratewarden/edge/fastedge\.\(\*(OriginClient|headerConn|dialer)\))`)},
	{"fasthttp server", regexp.MustCompile(`^github\.com/valyala/(fasthttp|bytebufferpool)\.`)},
	{"decision encoding and writing", regexp.MustCompile(`^github\.com/ratewarden/ratewarden/decisions[./]`)},
	{"limiter decision", regexp.MustCompile(`^github\.com/ratewarden/ratewarden/edge[./]`)},
	{"proxy and transport", regexp.MustCompile(`^(net/http/httputil\.|net/http\.\(\*Transport\)|net/http\.\(\*persistConn\)|net/http\.\(\*Request\)\.write|net/http\.persistConnWriter|net/http\.\(\*bodyEOFSignal\)|net/http\.\(\*transferWriter\))`)},
	{"net/http server", regexp.MustCompile(`^(net/http\.|net/textproto\.|bufio\.|net\.|internal/poll\.)`)},
}

func main() {
	totals, all, err := split(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "profilesplit:", err)
		os.Exit(1)
	}
	if all == 0 {
		fmt.Fprintln(os.Stderr, "profilesplit: no samples")
		os.Exit(1)
	}
	type row struct {
		name string
		d    time.Duration
	}
	var rows []row
	for k, v := range totals {
		rows = append(rows, row{k, v})
	}
	sort.Slice(rows, func(i, j int) bool {
		return rows[i].d > rows[j].d || (rows[i].d == rows[j].d && rows[i].name < rows[j].name)
	})
	for _, r := range rows {
		fmt.Printf("%-32s %8.2fs %5.1f%%\n", r.name, r.d.Seconds(), 100*float64(r.d)/float64(all))
	}
	fmt.Printf("%-32s %8.2fs\n", "total", all.Seconds())
}

// split reads `pprof -traces` output: samples separated by lines of dashes,
// each starting with its value and then one frame per line, leaf first.
func split(r io.Reader) (map[string]time.Duration, time.Duration, error) {
	totals := map[string]time.Duration{}
	var all time.Duration
	var val time.Duration
	var frames []string
	flush := func() {
		if len(frames) > 0 {
			totals[classify(frames)] += val
			all += val
		}
		frames, val = frames[:0], 0
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-----------+") {
			flush()
			in = true
			continue
		}
		if !in || strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		if len(frames) == 0 && val == 0 && len(f) >= 2 {
			d, err := time.ParseDuration(f[0])
			if err != nil {
				return nil, 0, fmt.Errorf("sample value %q: %v", f[0], err)
			}
			val = d
			frames = append(frames, f[1])
			continue
		}
		if strings.Contains(line, ":") && !strings.Contains(f[0], ".") {
			continue // a label line ("bytes:[...]")
		}
		frames = append(frames, f[0])
	}
	flush()
	return totals, all, sc.Err()
}

func classify(frames []string) string {
	for _, g := range mechanism {
		for _, f := range frames {
			if g.re.MatchString(f) {
				return g.name
			}
		}
	}
	for _, f := range frames {
		for _, g := range functional {
			if g.re.MatchString(f) {
				return g.name
			}
		}
	}
	return "other"
}
