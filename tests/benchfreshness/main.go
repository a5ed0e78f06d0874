// Command benchfreshness is tests/bench-freshness: how long a decision
// takes from the edge to its window's EMF document. It runs the real
// binary: `ratewarden edge` writing the decision log in front of a small
// origin, and `ratewarden aggregate --emf file:...` following the log with
// 1 s windows; it loads the edge at a steady rate, watches the EMF file
// for each window's documents, then reads the log and, for every
// decision, takes the time the document that holds it appeared (its
// window's, or a correction's) less the decision's time. It prints the
// p50, p99 and maximum. A benchmark, not a test: CI does not run it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
)

func main() {
	bin := flag.String("bin", "", "the ratewarden `binary`")
	seed := flag.String("seed", "examples/seed.yaml", "the edge's configuration `file`, to which the decisions section is added")
	rate := flag.Int("rate", 500, "requests per `second`")
	dur := flag.Duration("duration", 20*time.Second, "how long to load the edge")
	linger := flag.Duration("linger", 0, "decisions.linger of the edge (0: the default)")
	lateness := flag.Duration("lateness", 0, "the aggregator's --lateness (0: its default)")
	flag.Parse()
	if err := run(*bin, *seed, *rate, *dur, *linger, *lateness); err != nil {
		fmt.Fprintln(os.Stderr, "benchfreshness:", err)
		os.Exit(1)
	}
}

// doc is when one EMF document appeared, and the log offsets it holds.
type doc struct {
	to   uint64
	seen time.Time
}

func run(bin, seed string, rate int, dur, linger, lateness time.Duration) error {
	tmp, err := os.MkdirTemp("", "benchfreshness")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg, err := os.ReadFile(seed)
	if err != nil {
		return err
	}
	cfg = bytes.Replace(cfg, []byte("trusted_proxies: []"), []byte("trusted_proxies: [127.0.0.1]"), 1)
	if linger > 0 {
		cfg = append(cfg, "\ndecisions:\n  linger: "+linger.String()+"\n"...)
	}
	cfgPath := filepath.Join(tmp, "edge.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return err
	}
	origin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	ol, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go origin.Serve(ol)
	defer origin.Close()
	edgeAddr, err := freePort()
	if err != nil {
		return err
	}
	logDir, stateDir, emfPath := filepath.Join(tmp, "log"), filepath.Join(tmp, "state"), filepath.Join(tmp, "emf.jsonl")
	edge := exec.Command(bin, "edge", "--config", cfgPath, "--listen", edgeAddr, "--upstream", "http://"+ol.Addr().String(),
		"--admin-listen", "off", "--decisions-dir", logDir)
	if err := edge.Start(); err != nil {
		return err
	}
	defer edge.Process.Kill()
	// The edge makes the log's directory; the aggregator needs it.
	if err := waitFor(edgeAddr); err != nil {
		return err
	}
	args := []string{"aggregate", "--decisions-dir", logDir, "--state-dir", stateDir, "--emf", "file:" + emfPath,
		"--window", "1s", "--admin-listen", "off"}
	if lateness > 0 {
		args = append(args, "--lateness", lateness.String())
	}
	agg := exec.Command(bin, args...)
	aggLog, err := os.Create(filepath.Join(tmp, "aggregate.log"))
	if err != nil {
		return err
	}
	defer aggLog.Close()
	agg.Stderr = aggLog
	if err := agg.Start(); err != nil {
		return err
	}
	defer agg.Process.Kill()

	ctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	docs := map[int64][]doc{} // by window start, Unix nanoseconds
	var watchErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); watchErr = watch(ctx, emfPath, docs) }()

	start := time.Now()
	if err := load(edgeAddr, rate, dur); err != nil {
		return err
	}
	// The last window closes once the aggregator's idle watermark passes
	// it: window + lateness + idle after its start, and a tick.
	time.Sleep(5 * time.Second)
	stopWatch()
	wg.Wait()
	if watchErr != nil {
		return watchErr
	}
	edge.Process.Signal(os.Interrupt)
	edge.Wait()
	agg.Process.Signal(os.Interrupt)
	agg.Wait()

	rd, err := decisionlog.Open(logDir, decisionlog.Filter{})
	if err != nil {
		return err
	}
	defer rd.Close()
	var lat []time.Duration
	var wins []int64 // the window of each of lat
	missing := 0
	for {
		d, off, err := rd.Next(context.Background(), false)
		if decisionlog.IsEnd(err) {
			break
		}
		if err != nil {
			return err
		}
		if d.Kind != decisions.KindDecision {
			continue
		}
		w := d.Time.UnixNano() / int64(time.Second) * int64(time.Second)
		i := slices.IndexFunc(docs[w], func(x doc) bool { return x.to >= off })
		if i < 0 {
			missing++
			continue
		}
		lat = append(lat, docs[w][i].seen.Sub(d.Time))
		wins = append(wins, w)
	}
	if len(lat) == 0 {
		out, _ := os.ReadFile(aggLog.Name())
		return fmt.Errorf("none of %d decisions reached one of the %d windows' EMF documents; the aggregator said:\n%s", missing, len(docs), out)
	}
	// The last two windows close on the aggregator's idle watermark once
	// the load stops (window + lateness + idle), not on later events as
	// every window of steady traffic does: reported apart.
	last := slices.Max(wins)
	var steady []time.Duration
	for i, w := range wins {
		if w < last-int64(time.Second) {
			steady = append(steady, lat[i])
		}
	}
	lingerName, latenessName := "default", "default"
	if linger > 0 {
		lingerName = linger.String()
	}
	if lateness > 0 {
		latenessName = lateness.String()
	}
	fmt.Printf("rate %d/s for %v (%.0f s), decisions.linger %s, --lateness %s, 1s windows: %d decisions, %d windows, %d not in a document before shutdown\n",
		rate, dur, time.Since(start).Seconds(), lingerName, latenessName, len(lat), len(docs), missing)
	fmt.Printf("freshness (EMF document written - decision time), every decision: %s\n", quantiles(lat))
	fmt.Printf("freshness, all windows but the last two (steady traffic): %s\n", quantiles(steady))
	return nil
}

// quantiles formats the p50, p99 and maximum of lat.
func quantiles(lat []time.Duration) string {
	if len(lat) == 0 {
		return "none"
	}
	lat = slices.Clone(lat)
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(time.Millisecond)
	}
	return fmt.Sprintf("p50 %v, p99 %v, max %v (%d decisions)", q(0.5), q(0.99), lat[len(lat)-1].Round(time.Millisecond), len(lat))
}

// watch reads the EMF file as it grows, every 5 ms, and notes when each
// window's documents appear, with the last log offset each holds.
func watch(ctx context.Context, path string, docs map[int64][]doc) error {
	var off int64
	var partial []byte
	seen := map[string]bool{}
	for ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		f.Seek(off, io.SeekStart)
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return err
		}
		now := time.Now()
		off += int64(len(b))
		data := append(partial, b...)
		last := bytes.LastIndexByte(data, '\n')
		if last < 0 {
			partial = data
			continue
		}
		partial = append([]byte(nil), data[last+1:]...)
		for line := range bytes.Lines(data[:last+1]) {
			var d struct {
				Window string `json:"rw_window_start"`
				Range  string `json:"rw_range"`
				Key    string `json:"rw_key"`
			}
			if err := json.Unmarshal(line, &d); err != nil {
				return fmt.Errorf("emf line: %w", err)
			}
			if seen[d.Key] {
				continue
			}
			seen[d.Key] = true
			start, err := time.Parse(time.RFC3339Nano, d.Window)
			if err != nil {
				return err
			}
			_, to, _ := strings.Cut(d.Range, "-")
			n, err := strconv.ParseUint(to, 10, 64)
			if err != nil {
				return fmt.Errorf("rw_range %q: %w", d.Range, err)
			}
			docs[start.UnixNano()] = append(docs[start.UnixNano()], doc{to: n, seen: now})
		}
	}
	return nil
}

// load sends rate requests a second for dur, from 1,000 client addresses.
func load(addr string, rate int, dur time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(dur)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := 0; time.Now().Before(end); i++ {
		<-tick.C
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			req, _ := http.NewRequest("GET", "http://"+addr+"/api/search?q=x", nil)
			req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.%d.%d", i%1000/250, i%250))
			res, err := client.Do(req)
			if err != nil {
				mu.Lock()
				firstErr = cmpErr(firstErr, err)
				mu.Unlock()
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}(i)
	}
	wg.Wait()
	return firstErr
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func waitFor(addr string) error {
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the edge does not listen on %s", addr)
}
