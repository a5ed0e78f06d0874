// Command benchfreshness is tests/bench-freshness: how long a decision
// takes from the edge to its window's EMF document. It runs the real
// binary in front of a small origin: `ratewarden edge` writing the
// decision log and `ratewarden aggregate --emf file:...` following it, or
// (-transport kinesis) the edge shipping its decisions to a Kinesis stream
// and the aggregator reading the stream, with its leases in DynamoDB, both
// on the stand-ins (kinesalite and dynalite, at the endpoints tests/run
// exports), or (-transport serve) `ratewarden serve`, the two in one
// process. Windows are 1 s. It loads the edge at a steady rate, watches
// the EMF file for each window's documents, then reads the decisions back
// (the log, or the stream shard by shard) and, for every decision, takes
// the time the document that holds it appeared (its window's, or a
// correction's) less the decision's time. It prints the p50, p99 and
// maximum. A benchmark, not a test: CI does not run it.
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
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	dkinesis "github.com/ratewarden/ratewarden/decisions/kinesis"
	dstream "github.com/ratewarden/ratewarden/decisions/stream"
)

// settings are a run's conditions; zero durations leave the binary's
// defaults.
type settings struct {
	transport string // log, kinesis or serve
	rate      int
	dur       time.Duration
	linger    time.Duration // decisions.linger, or decisions.kinesis.linger
	lateness  time.Duration // aggregate --lateness
	poll      time.Duration // aggregate --poll (kinesis)
	shards    int           // of the stream (kinesis)
}

func main() {
	var s settings
	bin := flag.String("bin", "", "the ratewarden `binary`")
	seed := flag.String("seed", "examples/seed.yaml", "the edge's configuration `file`, to which the decisions section is added")
	flag.StringVar(&s.transport, "transport", "log", "log (the edge writes the decision log, the aggregator follows it), kinesis (a stream on kinesalite, leases on dynalite) or serve (`ratewarden serve`: the edge and the aggregator in one process, sharing the log)")
	flag.IntVar(&s.rate, "rate", 500, "requests per `second`")
	flag.DurationVar(&s.dur, "duration", 20*time.Second, "how long to load the edge")
	flag.DurationVar(&s.linger, "linger", 0, "decisions.linger of the edge, or decisions.kinesis.linger with kinesis (0: the default)")
	flag.DurationVar(&s.lateness, "lateness", 0, "the aggregator's --lateness (0: its default)")
	flag.DurationVar(&s.poll, "poll", 0, "with kinesis, the aggregator's --poll (0: its default)")
	flag.IntVar(&s.shards, "shards", 4, "with kinesis, the stream's shards")
	flag.Parse()
	if err := run(*bin, *seed, s); err != nil {
		fmt.Fprintln(os.Stderr, "benchfreshness:", err)
		os.Exit(1)
	}
}

// doc is when one EMF document appeared, and the last source position
// (log offset, or event of its shard) it holds.
type doc struct {
	to   position
	seen time.Time
}

// window names a window of one partition: the log, or a shard.
type window struct {
	partition string
	start     int64 // Unix nanoseconds
}

// transport is how decisions go from the edge to the aggregator.
type transport struct {
	config string   // the edge's decisions section
	edge   []string // the edge's flags
	agg    []string // the aggregator's source flags
	// serve runs `ratewarden serve` with the edge's flags, the one
	// process that is both: agg is not used.
	serve  bool
	settle time.Duration
	// read hands every event the aggregator read, with its partition
	// and its position there, in order.
	read    func(fn func(partition string, pos uint64, d decisions.Decision)) error
	cleanup func()
}

// logTransport: the edge writes the decision log in dir, the aggregator
// follows it.
func logTransport(dir string, s settings) (*transport, error) {
	logDir := filepath.Join(dir, "log")
	t := &transport{edge: []string{"--decisions-dir", logDir}, agg: []string{"--decisions-dir", logDir},
		// The last window closes once the aggregator's idle watermark
		// passes it: window + lateness + idle after its start, and a
		// tick.
		settle: 5 * time.Second, cleanup: func() {}}
	if s.linger > 0 {
		t.config = "decisions:\n  linger: " + s.linger.String() + "\n"
	}
	t.read = func(fn func(string, uint64, decisions.Decision)) error {
		rd, err := decisionlog.Open(logDir, decisionlog.Filter{})
		if err != nil {
			return err
		}
		defer rd.Close()
		for {
			d, off, err := rd.Next(context.Background(), false)
			if decisionlog.IsEnd(err) {
				return nil
			}
			if err != nil {
				return err
			}
			fn("log", off, d)
		}
	}
	return t, nil
}

// serveTransport: `ratewarden serve` in dir, its edge and aggregator
// sharing the decision log (the aggregator wakes on each append), with
// 1 s windows (serve.window) and the lateness asked for (serve.lateness).
func serveTransport(dir string, s settings) (*transport, error) {
	t, err := logTransport(dir, s)
	if err != nil {
		return nil, err
	}
	t.serve = true
	t.config += "serve:\n  window: 1s\n"
	if s.lateness > 0 {
		t.config += "  lateness: " + s.lateness.String() + "\n"
	}
	t.edge = append(t.edge, "--partials-dir", filepath.Join(dir, "partials"), "--dashboard-listen", "off")
	return t, nil
}

// kinesisTransport: `ratewarden aws init` makes a stream and a lease
// table of unique names on the stand-ins; the edge ships its decisions to
// the stream, the aggregator reads it with its leases in the table and its
// state in dir.
func kinesisTransport(bin, dir string, s settings) (*transport, error) {
	kep, dep := os.Getenv(awstest.KinesisEnv), os.Getenv(awstest.DynamoDBEnv)
	if kep == "" || dep == "" {
		return nil, fmt.Errorf("%s and %s: want the stand-ins' endpoints (tests/run starts kinesalite and dynalite on loopback and sets them)", awstest.KinesisEnv, awstest.DynamoDBEnv)
	}
	for _, ep := range []string{kep, dep} {
		if u, err := url.Parse(ep); err != nil || !slices.Contains([]string{"127.0.0.1", "::1", "localhost"}, u.Hostname()) {
			return nil, fmt.Errorf("endpoint %q: want a stand-in on loopback", ep)
		}
	}
	// The binary and this process find them the SDK's usual way, with
	// static credentials: never the machine's.
	for k, v := range map[string]string{"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
		"AWS_SESSION_TOKEN": "", "AWS_PROFILE": "", "AWS_ENDPOINT_URL_KINESIS": kep, "AWS_ENDPOINT_URL_DYNAMODB": dep} {
		os.Setenv(k, v)
	}
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	stream, leases := "benchfreshness-"+suffix, "benchfreshness-leases-"+suffix
	out, err := exec.Command(bin, "aws", "init", "--stream", stream, "--shards", strconv.Itoa(s.shards), "--counters-table", "",
		"--lists-table", "", "--leases-table", leases, "--state-table", "").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("aws init: %v\n%s", err, out)
	}
	cfg, err := assemble.AWS(context.Background(), "")
	if err != nil {
		return nil, err
	}
	kc, dc := kinesis.NewFromConfig(cfg), dynamodb.NewFromConfig(cfg)
	t := &transport{
		edge: []string{"--decisions-dir", filepath.Join(dir, "log"), "--kinesis-stream", stream, "--kinesis-spill-dir", filepath.Join(dir, "spill")},
		agg:  []string{"--kinesis-stream", stream, "--leases-table", leases},
		// The last window closes once the shard's idle watermark passes
		// it, after the edge's linger (added by run) and the source's
		// poll: 5 s covers the rest, as for the log.
		settle: 5*time.Second + orDefault(s.poll, dkinesis.DefaultPoll),
		cleanup: func() {
			ctx := context.Background()
			kc.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String(stream)})
			dc.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(leases)})
		},
	}
	if s.linger > 0 {
		t.config = "decisions:\n  kinesis:\n    linger: " + s.linger.String() + "\n"
	}
	if s.poll > 0 {
		t.agg = append(t.agg, "--poll", s.poll.String())
	}
	// Each shard's events in the order the aggregator read them: its
	// position in the shard is the count before it.
	t.read = func(fn func(string, uint64, decisions.Decision)) error {
		next := map[string]uint64{}
		return dkinesis.Scan(context.Background(), kc, stream, dkinesis.ScanOptions{}, dstream.HandleFunc(func(_ context.Context, b *dstream.Batch) error {
			for _, d := range b.Events {
				fn(b.Partition, next[b.Partition], d)
				next[b.Partition]++
			}
			return nil
		}))
	}
	return t, nil
}

// orDefault is d, or def when d is zero.
func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func run(bin, seed string, s settings) error {
	tmp, err := os.MkdirTemp("", "benchfreshness")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var tr *transport
	switch s.transport {
	case "log":
		tr, err = logTransport(tmp, s)
	case "kinesis":
		tr, err = kinesisTransport(bin, tmp, s)
	case "serve":
		tr, err = serveTransport(tmp, s)
	default:
		err = fmt.Errorf("-transport %q: want log, kinesis or serve", s.transport)
	}
	if err != nil {
		return err
	}
	defer tr.cleanup()
	cfg, err := os.ReadFile(seed)
	if err != nil {
		return err
	}
	cfg = bytes.Replace(cfg, []byte("trusted_proxies: []"), []byte("trusted_proxies: [127.0.0.1]"), 1)
	cfg = append(cfg, "\n"+tr.config...)
	cfgPath := filepath.Join(tmp, "edge.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return err
	}
	// The linger the edge will use, default or not.
	c, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	linger := c.Decisions.Linger
	if s.transport == "kinesis" {
		linger = c.Decisions.Kinesis.Linger
		tr.settle += linger
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
	stateDir, emfPath := filepath.Join(tmp, "state"), filepath.Join(tmp, "emf.jsonl")
	// The aggregator's output (or serve's, which is both).
	aggLog, err := os.Create(filepath.Join(tmp, "aggregate.log"))
	if err != nil {
		return err
	}
	defer aggLog.Close()
	edgeArgs := append([]string{"edge", "--config", cfgPath, "--listen", edgeAddr, "--upstream", "http://" + ol.Addr().String(),
		"--admin-listen", "off"}, tr.edge...)
	if tr.serve { // the edge's flags and the aggregator's state and EMF
		edgeArgs[0] = "serve"
		edgeArgs = append(edgeArgs, "--state-dir", stateDir, "--emf", "file:"+emfPath)
	}
	edge := exec.Command(bin, edgeArgs...)
	if tr.serve {
		edge.Stderr = aggLog
	}
	if err := edge.Start(); err != nil {
		return err
	}
	defer edge.Process.Kill()
	// The edge makes the log's directory; the aggregator needs it.
	if err := waitFor(edgeAddr); err != nil {
		return err
	}
	var agg *exec.Cmd
	if !tr.serve {
		args := append([]string{"aggregate", "--state-dir", stateDir, "--emf", "file:" + emfPath, "--window", "1s", "--admin-listen", "off"}, tr.agg...)
		if s.lateness > 0 {
			args = append(args, "--lateness", s.lateness.String())
		}
		agg = exec.Command(bin, args...)
		agg.Stderr = aggLog
		if err := agg.Start(); err != nil {
			return err
		}
		defer agg.Process.Kill()
	}

	ctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	docs := map[window][]doc{}
	var watchErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); watchErr = watch(ctx, emfPath, docs) }()
	// The largest the aggregator's state got, all partitions together:
	// what each save writes.
	var maxState int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			maxState = max(maxState, dirSize(stateDir))
		}
	}()

	start := time.Now()
	if err := load(edgeAddr, s.rate, s.dur); err != nil {
		return err
	}
	time.Sleep(tr.settle)
	stopWatch()
	wg.Wait()
	if watchErr != nil {
		return watchErr
	}
	edge.Process.Signal(os.Interrupt)
	edge.Wait()
	if agg != nil {
		agg.Process.Signal(os.Interrupt)
		agg.Wait()
	}

	var lat []time.Duration
	var wins []int64 // the window of each of lat
	missing := 0
	err = tr.read(func(partition string, pos uint64, d decisions.Decision) {
		if d.Kind != decisions.KindDecision {
			return
		}
		w := window{partition, d.Time.UnixNano() / int64(time.Second) * int64(time.Second)}
		seen, ok := written(docs, w, pos)
		if !ok {
			missing++
			return
		}
		lat = append(lat, seen.Sub(d.Time))
		wins = append(wins, w.start)
	})
	if err != nil {
		return err
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
	name := func(d time.Duration) string {
		if d > 0 {
			return "set"
		}
		return "default"
	}
	conditions := fmt.Sprintf("decisions.linger %v (%s), --lateness %s", linger, name(s.linger), name(s.lateness))
	if tr.serve {
		conditions = fmt.Sprintf("serve, decisions.linger %v (%s), serve.lateness %s", linger, name(s.linger), name(s.lateness))
	}
	if s.transport == "kinesis" {
		conditions = fmt.Sprintf("kinesis, %d shards, decisions.kinesis.linger %v (%s), --poll %v (%s), --lateness %s",
			s.shards, linger, name(s.linger), orDefault(s.poll, dkinesis.DefaultPoll), name(s.poll), name(s.lateness))
	}
	fmt.Printf("rate %d/s for %v (%.0f s), %s, 1s windows: %d decisions, %d windows, %d not in a document before shutdown\n",
		s.rate, s.dur, time.Since(start).Seconds(), conditions, len(lat), len(docs), missing)
	fmt.Printf("freshness (EMF document written - decision time), every decision: %s\n", quantiles(lat))
	fmt.Printf("freshness, all windows but the last two (steady traffic): %s\n", quantiles(steady))
	if s.transport == "kinesis" {
		// What the aggregator writes for it: a state save per batch (and
		// another when the batch closes windows) and a checkpoint.
		out, err := os.ReadFile(aggLog.Name())
		if err != nil {
			return err
		}
		m := batchesRE.FindAllSubmatch(out, -1)
		if m == nil {
			return fmt.Errorf("the aggregator reported no batches:\n%s", out)
		}
		last := m[len(m)-1]
		fmt.Printf("aggregator: %s batches, %s checkpoints in %.0f s; state of the %d shards at most %d B together\n",
			last[1], last[2], time.Since(start).Seconds(), s.shards, maxState)
	}
	return nil
}

// dirSize is the size of the files in dir.
func dirSize(dir string) int64 {
	var size int64
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			size += fi.Size()
		}
	}
	return size
}

// batchesRE finds the batches and checkpoints in the Kinesis aggregator's
// progress lines.
var batchesRE = regexp.MustCompile(`batches (\d+), checkpoints (\d+)`)

// written is when the first document of window w holding position pos
// appeared: the window's own, or a correction after it (whose range
// starts after the window's). Documents are in the order they appeared.
func written(docs map[window][]doc, w window, pos uint64) (time.Time, bool) {
	p := offset(pos)
	i := slices.IndexFunc(docs[w], func(x doc) bool { return x.to.holds(p) })
	if i < 0 {
		return time.Time{}, false
	}
	return docs[w][i].seen, true
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
// window's documents appear, with the last position each holds.
func watch(ctx context.Context, path string, docs map[window][]doc) error {
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
				Partition string `json:"rw_partition"`
				Window    string `json:"rw_window_start"`
				Range     string `json:"rw_range"`
				Key       string `json:"rw_key"`
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
			_, to, err := parseRange(d.Range)
			if err != nil {
				return fmt.Errorf("emf line rw_range: %w", err)
			}
			w := window{d.Partition, start.UnixNano()}
			docs[w] = append(docs[w], doc{to: to, seen: now})
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
