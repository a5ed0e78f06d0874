package emf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
)

// sinkHarness is one Sink under test and a way to read back, after Close,
// what it delivered.
type sinkHarness struct {
	sink Sink
	// delivered returns what reached the destination once the sink is
	// closed: one entry per document received, in order of arrival.
	delivered func(t *testing.T) []string
	// received is what delivered shows for doc; nil means doc itself, for
	// sinks that deliver documents byte for byte.
	received func(doc []byte) string
}

func (h sinkHarness) want(docs [][]byte) []string {
	out := make([]string, len(docs))
	for i, d := range docs {
		if h.received != nil {
			out[i] = h.received(d)
		} else {
			out[i] = string(d)
		}
	}
	return out
}

// conformanceDoc is document i of writer w: a valid EMF document, unique
// by its "doc" dimension, of a size that grows with pad.
func conformanceDoc(w, i, pad int) []byte {
	id := strconv.Itoa(w) + "-" + strconv.Itoa(i)
	return []byte(`{"_aws":{"Timestamp":1700000000000,"CloudWatchMetrics":[{"Namespace":"conformance","Dimensions":[["doc"]],` +
		`"Metrics":[{"Name":"n","Unit":"Count"}]}]},"doc":"` + id + `","id":"` + id + `","n":` + strconv.Itoa(i) +
		`,"pad":"` + strings.Repeat("x", pad) + `"}`)
}

// checkAccounts checks that every one of writes documents is written,
// dropped or buffered.
func checkAccounts(t *testing.T, st SinkStats, writes int) {
	t.Helper()
	if st.Written+st.Dropped+st.Buffered != uint64(writes) {
		t.Errorf("stats %+v account for %d documents, want %d", st, st.Written+st.Dropped+st.Buffered, writes)
	}
}

// runSinkConformance checks the Sink contract: every document written is
// delivered once, whole and in order; Close delivers what is buffered;
// Stats accounts for each document; Write after Close fails and counts a
// drop; Close twice is harmless. Every sink in the package runs it.
func runSinkConformance(t *testing.T, newSink func(t *testing.T) sinkHarness) {
	t.Run("delivers every document once", func(t *testing.T) {
		h := newSink(t)
		ctx := testContext(t)
		var want [][]byte
		for i := range 50 {
			d := conformanceDoc(0, i, i*37)
			want = append(want, d)
			buf := bytes.Clone(d)
			must(t, h.sink.Write(ctx, buf))
			clear(buf) // the sink must not retain doc
			checkAccounts(t, h.sink.Stats(), i+1)
			if i%20 == 0 {
				must(t, h.sink.Flush(ctx))
				if st := h.sink.Stats(); st.Written != uint64(i+1) || st.Buffered != 0 {
					t.Errorf("after Flush, stats %+v, want %d written, none buffered", st, i+1)
				}
			}
		}
		must(t, h.sink.Close(ctx))
		must(t, h.sink.Close(ctx))
		if got := h.delivered(t); !slices.Equal(got, h.want(want)) {
			t.Errorf("delivered %d documents, want %d, or they differ", len(got), len(want))
		}
		st := h.sink.Stats()
		if st.Written != 50 || st.Dropped != 0 || st.Buffered != 0 || st.Errors != 0 || st.Sink == "" {
			t.Errorf("stats %+v, want 50 written", st)
		}
		if err := h.sink.Write(ctx, conformanceDoc(0, 50, 0)); !errors.Is(err, ErrSinkClosed) {
			t.Errorf("write after close: %v, want ErrSinkClosed", err)
		}
		if st := h.sink.Stats(); st.Written != 50 || st.Dropped != 1 || st.Errors != 0 {
			t.Errorf("after a write to a closed sink, stats %+v, want 50 written and 1 dropped", st)
		}
	})
	t.Run("close delivers what is buffered", func(t *testing.T) {
		h := newSink(t)
		ctx := testContext(t)
		const n = 40
		var want [][]byte
		for i := range n {
			want = append(want, conformanceDoc(1, i, 10))
			must(t, h.sink.Write(ctx, want[i]))
		}
		checkAccounts(t, h.sink.Stats(), n)
		must(t, h.sink.Close(ctx))
		if got := h.delivered(t); !slices.Equal(got, h.want(want)) {
			t.Errorf("delivered %d documents after Close, want %d, or they differ", len(got), n)
		}
		if st := h.sink.Stats(); st.Written != n || st.Dropped != 0 || st.Buffered != 0 || st.Errors != 0 {
			t.Errorf("stats %+v, want %d written", st, n)
		}
	})
	t.Run("concurrent writers", func(t *testing.T) {
		h := newSink(t)
		ctx := testContext(t)
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			want [][]byte
		)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 100 {
					d := conformanceDoc(w, i, 0)
					if err := h.sink.Write(ctx, d); err != nil {
						t.Error(err)
					}
					mu.Lock()
					want = append(want, d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		must(t, h.sink.Close(ctx))
		got := h.delivered(t)
		wantSet := h.want(want)
		slices.Sort(got)
		slices.Sort(wantSet)
		if !slices.Equal(got, wantSet) {
			t.Errorf("delivered %d documents, want these 400 once each", len(got))
		}
		if st := h.sink.Stats(); st.Written != 400 || st.Dropped != 0 || st.Buffered != 0 {
			t.Errorf("stats %+v, want 400 written", st)
		}
	})
}

// lines splits newline-delimited documents.
func lines(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	for _, l := range splitLines(t, b) {
		out = append(out, string(l))
	}
	return out
}

func splitLines(t *testing.T, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		out = append(out, bytes.Clone(sc.Bytes()))
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func TestStdoutSinkConformance(t *testing.T) {
	runSinkConformance(t, func(t *testing.T) sinkHarness {
		var buf syncBuffer
		return sinkHarness{sink: NewStdoutSink(&buf), delivered: func(t *testing.T) []string { return lines(t, buf.b.Bytes()) }}
	})
}

// readAll reads the active file and every rotated file, oldest first.
func readAll(t *testing.T, dir string) [][]byte {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "emf-*.log"))
	must(t, err)
	// Rotated files are NAME-STAMP[-N].log: by STAMP, then N (none first).
	order := func(name string) (string, int) {
		rest := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(name), "emf-"), ".log")
		stamp, num, _ := strings.Cut(rest, "Z-")
		n, _ := strconv.Atoi(num)
		return strings.TrimSuffix(stamp, "Z"), n
	}
	slices.SortFunc(names, func(a, b string) int {
		sa, na := order(a)
		sb, nb := order(b)
		if c := strings.Compare(sa, sb); c != 0 {
			return c
		}
		return na - nb
	})
	names = append(names, filepath.Join(dir, "emf.log"))
	var out [][]byte
	for _, n := range names {
		b, err := os.ReadFile(n)
		must(t, err)
		out = append(out, splitLines(t, b)...)
	}
	return out
}

func TestFileSinkConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  FileConfig
	}{
		{"no rotation", FileConfig{}},
		{"rotating by size", FileConfig{MaxSize: 1 * KiB, Keep: 1000, BufferSize: 100}},
		{"rotating by size, names colliding", FileConfig{MaxSize: 2 * KiB, Keep: 1000, BufferSize: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			runSinkConformance(t, func(t *testing.T) sinkHarness {
				dir := t.TempDir()
				cfg := c.cfg
				cfg.Path = filepath.Join(dir, "emf.log")
				clock := &manualClock{t: testNow}
				cfg.Now = clock.now
				s, err := NewFileSink(cfg)
				must(t, err)
				return sinkHarness{sink: s, delivered: func(t *testing.T) []string {
					var out []string
					for _, d := range readAll(t, dir) {
						out = append(out, string(d))
					}
					return out
				}}
			})
		})
	}
}

func TestFileSinkRotation(t *testing.T) {
	doc := func(i int) []byte { return []byte(`{"i":` + strconv.Itoa(1000+i) + `}`) } // 10 bytes and a newline
	cases := []struct {
		name      string
		maxSize   ByteSize // set after construction, below Validate's floor, to keep files small
		maxAge    time.Duration
		keep      int
		docs      int
		ageEvery  int // the clock jumps an hour after every ageEvery documents
		wantFiles []string
		kept      int // newest documents expected across the kept files
	}{
		{"size: 3 documents per file", 33, 0, 10, 7, 0,
			[]string{"emf-20250102T030405.009Z.log", "emf-20250102T030405.012Z.log", "emf.log"}, 7},
		{"size: a document exactly filling the file", 22, 0, 10, 3, 0,
			[]string{"emf-20250102T030405.008Z.log", "emf.log"}, 3},
		{"keep 1", 33, 0, 1, 10, 0,
			[]string{"emf-20250102T030405.015Z.log", "emf.log"}, 4},
		{"age", MiB, time.Hour, 10, 4, 2,
			[]string{"emf-20250102T040405.008Z.log", "emf.log"}, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := &manualClock{t: testNow}
			s, err := NewFileSink(FileConfig{Path: filepath.Join(dir, "emf.log"), MaxAge: c.maxAge, Keep: c.keep, Now: clock.now})
			must(t, err)
			s.cfg.MaxSize = c.maxSize
			var jump time.Duration
			for i := range c.docs {
				clock.set(testNow.Add(jump + time.Duration(i)*time.Millisecond))
				must(t, s.Write(context.Background(), doc(i)))
				if c.ageEvery > 0 && (i+1)%c.ageEvery == 0 {
					jump += time.Hour
				}
			}
			must(t, s.Close(context.Background()))
			entries, err := os.ReadDir(dir)
			must(t, err)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if !slices.Equal(names, c.wantFiles) {
				t.Errorf("files %v, want %v", names, c.wantFiles)
			}
			got := readAll(t, dir)
			var want [][]byte
			for i := c.docs - c.kept; i < c.docs; i++ {
				want = append(want, doc(i))
			}
			if !slices.EqualFunc(got, want, bytes.Equal) {
				t.Errorf("kept documents %q, want %q", got, want)
			}
			if st := s.Stats(); st.Written != uint64(c.docs) || st.Dropped != 0 || st.Errors != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestFileSinkNameCollision(t *testing.T) {
	dir := t.TempDir()
	clock := &manualClock{t: testNow}
	s, err := NewFileSink(FileConfig{Path: filepath.Join(dir, "emf.log"), Keep: 2, Now: clock.now})
	must(t, err)
	s.cfg.MaxSize = 11 // one document per file; the clock stands still
	for i := range 4 {
		must(t, s.Write(context.Background(), []byte(`{"i":`+strconv.Itoa(1000+i)+`}`)))
	}
	must(t, s.Close(context.Background()))
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	want := []string{"emf-20250102T030405.006Z-1.log", "emf-20250102T030405.006Z-2.log", "emf.log"}
	if !slices.Equal(names, want) {
		t.Errorf("files %v, want %v (the oldest, without a number, pruned)", names, want)
	}
}

// manualClock reads the time it was set to.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func TestFileSinkAppendsToExisting(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "emf.log")
	must(t, os.WriteFile(path, []byte("{\"old\":1}\n"), 0o644))
	s, err := NewFileSink(FileConfig{Path: path})
	must(t, err)
	must(t, s.Write(context.Background(), []byte(`{"new":1}`)))
	if st := s.Stats(); st.Buffered != 1 {
		t.Errorf("before Flush: stats %+v, want 1 buffered", st)
	}
	must(t, s.Flush(context.Background()))
	b, err := os.ReadFile(path)
	must(t, err)
	if string(b) != "{\"old\":1}\n{\"new\":1}\n" {
		t.Errorf("file %q", b)
	}
	must(t, s.Close(context.Background()))
}

// TestFileSinkCreatesDirectory: a file in directories that do not exist
// yet gets them (0o755 less the umask), as the decision log makes its own
// directory, where NewFileSink failed with "no such file or directory";
// a rotation after the directory was removed makes it again.
func TestFileSinkCreatesDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "emf", "2026")
	path := filepath.Join(dir, "emf.log")
	clock := &manualClock{t: testNow}
	s, err := NewFileSink(FileConfig{Path: path, MaxAge: time.Minute, Now: clock.now})
	must(t, err)
	fi, err := os.Stat(dir)
	must(t, err)
	if !fi.IsDir() || fi.Mode().Perm()&0o700 != 0o700 || fi.Mode().Perm()&^0o755 != 0 {
		t.Errorf("%s: mode %v, want a directory of 0o755 less the umask", dir, fi.Mode())
	}
	must(t, s.Write(context.Background(), []byte(`{"a":1}`)))
	must(t, s.Flush(context.Background()))
	must(t, os.RemoveAll(dir))
	clock.set(testNow.Add(time.Hour))
	must(t, s.Write(context.Background(), []byte(`{"b":1}`)))
	must(t, s.Close(context.Background()))
	if b, err := os.ReadFile(path); err != nil || string(b) != "{\"b\":1}\n" {
		t.Errorf("after the directory was removed: %q, %v", b, err)
	}
}

func TestFileConfigValidate(t *testing.T) {
	cases := []struct {
		cfg  FileConfig
		want string
	}{
		{FileConfig{Path: "x"}, ""},
		{FileConfig{}, `path: "" is not allowed`},
		{FileConfig{Path: "x", MaxSize: 10}, "max_size: 10 is not allowed"},
		{FileConfig{Path: "x", Keep: -1}, "keep: -1 is not allowed"},
		{FileConfig{Path: "x", MaxAge: -time.Second}, "max_age: -1s is not allowed"},
	}
	for _, c := range cases {
		c.cfg.SetDefaults()
		err := c.cfg.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

func TestLoggerToFileAndStdout(t *testing.T) {
	dir := t.TempDir()
	fs, err := NewFileSink(FileConfig{Path: filepath.Join(dir, "emf.log")})
	must(t, err)
	var out syncBuffer
	l, err := New(Config{ValidateDocuments: true}, nil, NewStdoutSink(&out), fs)
	must(t, err)
	for i := range 120 {
		must(t, l.PutMetric("m"+strconv.Itoa(i), 1, Count))
	}
	must(t, l.FlushAt(context.Background(), testNow))
	must(t, l.Close(context.Background()))
	fromFile := readAll(t, dir)
	fromStdout := splitLines(t, out.b.Bytes())
	if len(fromFile) != 2 || !slices.EqualFunc(fromFile, fromStdout, bytes.Equal) {
		t.Errorf("file has %d documents, stdout %d; want the same 2", len(fromFile), len(fromStdout))
	}
	st := l.Stats()
	for i, r := range st.Sinks {
		if r.Written != 2 || r.Split != 1 || r.Sink.Written != 2 {
			t.Errorf("sink %d report %+v", i, r)
		}
	}
}

func TestAgentSinkConformance(t *testing.T) {
	for _, network := range []string{"tcp", "udp"} {
		t.Run(network, func(t *testing.T) {
			runSinkConformance(t, func(t *testing.T) sinkHarness {
				srv := newAgentServer(t, network)
				return sinkHarness{sink: newAgentTestSink(t, srv, 8<<20), delivered: srv.lines}
			})
		})
	}
}

func TestLogsSinkConformance(t *testing.T) {
	runSinkConformance(t, func(t *testing.T) sinkHarness { return newLogsHarness(t, &logsServer{}, nil) })
}

func TestMetricDataSinkConformance(t *testing.T) {
	runSinkConformance(t, func(t *testing.T) sinkHarness { return newMetricDataHarness(t, &metricDataServer{}, nil) })
}

// newLogsHarness is a LogsSink, its options edited by edit, against srv.
func newLogsHarness(t *testing.T, srv *logsServer, edit func(*LogsOptions)) sinkHarness {
	s := newLogsTest(t, srv, edit)
	return sinkHarness{sink: s, delivered: func(t *testing.T) []string {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return slices.Clone(srv.messages)
	}}
}

// newMetricDataHarness is a MetricDataSink, its options edited by edit,
// against srv. Each document is one datum of its own "doc" dimension.
func newMetricDataHarness(t *testing.T, srv *metricDataServer, edit func(*MetricDataOptions)) sinkHarness {
	s := newMetricDataTest(t, srv, edit)
	return sinkHarness{sink: s, delivered: func(t *testing.T) []string {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return slices.Clone(srv.series)
	}, received: func(doc []byte) string {
		var d struct {
			Doc string  `json:"doc"`
			N   float64 `json:"n"`
		}
		if err := json.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("conformance|n|doc=%s|Count|0|1700000000000 %v×1", d.Doc, d.N)
	}}
}

// hangGate makes a test server's calls hang, as an endpoint that accepts
// a call and never answers: while the gate is shut, each call waits until
// its client gives up on it (cuts it) and is not recorded. Calls that
// arrive after open are answered. Its block is a server's block hook.
type hangGate struct{ shut atomic.Bool }

func (g *hangGate) block(r *http.Request) {
	if g.shut.Load() {
		<-r.Context().Done()
	}
}

// TestAWSSinksHung: against a CloudWatch endpoint that hangs, a Flush of
// a LogsSink or MetricDataSink returns ErrSinkBehind once FlushTimeout
// passes, with every document it waited for dropped and counted and none
// buffered; the documents written after it are delivered, once each, when
// the endpoint answers again; and a Close on the hung endpoint returns
// ErrSinkBehind and counts what it dropped. They used to wait as long as
// the caller's context let them.
func TestAWSSinksHung(t *testing.T) {
	// Short, yet long enough for the flush that the endpoint answers (tens
	// of milliseconds under the race detector) on a busy machine.
	const timeout = 500 * time.Millisecond
	for _, tc := range []struct {
		name string
		open func(t *testing.T, g *hangGate) sinkHarness
	}{
		{"logs", func(t *testing.T, g *hangGate) sinkHarness {
			return newLogsHarness(t, &logsServer{block: g.block}, func(o *LogsOptions) { o.FlushTimeout = timeout })
		}},
		{"metric data", func(t *testing.T, g *hangGate) sinkHarness {
			return newMetricDataHarness(t, &metricDataServer{block: g.block}, func(o *MetricDataOptions) { o.FlushTimeout = timeout })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &hangGate{}
			h := tc.open(t, g)
			ctx := context.Background() // no deadline, as the aggregator's flush and the commands' close
			write := func(w, n int) [][]byte {
				var docs [][]byte
				for i := range n {
					docs = append(docs, conformanceDoc(w, i, 0))
					must(t, h.sink.Write(ctx, docs[i]))
				}
				return docs
			}
			behind := func(what string, err error, n int) {
				t.Helper()
				if want := fmt.Sprintf("%d documents not delivered within %v", n, timeout); !errors.Is(err, ErrSinkBehind) || !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %v, want ErrSinkBehind saying %q", what, err, want)
				}
			}
			stats := func(what string, written, dropped uint64) {
				t.Helper()
				if st := h.sink.Stats(); st.Written != written || st.Dropped != dropped || st.Buffered != 0 {
					t.Errorf("after %s: stats %+v, want %d written, %d dropped, none buffered", what, st, written, dropped)
				}
			}

			g.shut.Store(true)
			write(0, 30)
			behind("flush", h.sink.Flush(ctx), 30)
			stats("the flush", 0, 30)

			g.shut.Store(false)
			want := write(1, 20)
			must(t, h.sink.Flush(ctx))
			stats("the flush once answered", 20, 30)

			g.shut.Store(true)
			write(2, 10)
			behind("close", h.sink.Close(ctx), 10)
			stats("the close", 20, 40)
			if got := h.delivered(t); !slices.Equal(got, h.want(want)) {
				t.Errorf("delivered %d documents, want the %d written after the first flush, once each", len(got), len(want))
			}
		})
	}
}

// TestFileSinkHolds: a sink opened on a file tells the documents the file
// holds, byte for byte, from those it does not, and after a Flush it
// knows what it wrote since; WriteAgain leaves out of a file what it
// holds, writes it to a sink that cannot tell, and counts what it left.
func TestFileSinkHolds(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "emf.log")
	doc := windowDocument(150) // 4 documents
	first, err := NewFileSink(FileConfig{Path: path})
	must(t, err)
	w1, err := NewWriter(WriterOptions{}, first)
	must(t, err)
	doc.Timestamp = testNow
	must(t, w1.Write(ctx, doc, testNow))
	must(t, w1.Close(ctx))
	before, err := os.ReadFile(path)
	must(t, err)
	lines := bytes.Split(bytes.TrimSuffix(before, []byte("\n")), []byte("\n"))
	if len(lines) != 4 {
		t.Fatalf("the file holds %d documents, want 4", len(lines))
	}

	s, err := NewFileSink(FileConfig{Path: path})
	must(t, err)
	for _, l := range lines {
		if held, err := s.Holds(l); err != nil || !held {
			t.Errorf("Holds(%.40s...) = %v, %v; want true", l, held, err)
		}
		// A document that differs by a byte is not held.
		other := bytes.Replace(l, []byte(`"Requests":1200`), []byte(`"Requests":1201`), 1)
		if held, _ := s.Holds(other); held && !bytes.Equal(other, l) {
			t.Errorf("Holds of a document the file does not hold: true")
		}
	}
	mem := &memSink{}
	w, err := NewWriter(WriterOptions{}, s, mem)
	must(t, err)
	must(t, w.WriteAgain(ctx, doc, testNow)) // held: not written to the file
	doc.Timestamp = testNow.Add(time.Minute)
	must(t, w.WriteAgain(ctx, doc, testNow)) // another minute's: written
	must(t, w.Flush(ctx))
	if held, err := s.Holds(firstLine(t, path, 4)); err != nil || !held {
		t.Errorf("after a Flush, a document written since: Holds %v, %v", held, err)
	}
	must(t, w.Close(ctx))
	after, err := os.ReadFile(path)
	must(t, err)
	if n := bytes.Count(after, []byte("\n")); n != 8 || !bytes.HasPrefix(after, before) {
		t.Errorf("the file holds %d documents after WriteAgain, want the 4 before and the 4 of another minute", n)
	}
	st := w.Stats().Sinks
	if st[0].Held != 4 || st[0].Written != 4 || st[1].Held != 0 || st[1].Written != 8 {
		t.Errorf("file: held %d, written %d (want 4, 4); memory: held %d, written %d (want 0, 8)", st[0].Held, st[0].Written, st[1].Held, st[1].Written)
	}
}

// firstLine returns line i (from 0) of the file at path.
func firstLine(t *testing.T, path string, i int) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	lines := bytes.Split(b, []byte("\n"))
	if i >= len(lines) {
		t.Fatalf("%s holds %d lines", path, len(lines))
	}
	return lines[i]
}

// TestFileSinkCutsTail: a file whose last line has no newline (a write a
// kill cut short) is cut back to its last whole line when the sink opens
// it, however long the cut line, and the sink says how much it cut; the
// next document is a line of its own.
func TestFileSinkCutsTail(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		cut            int64
	}{
		{"whole", "{\"a\":1}\n", "{\"a\":1}\n{\"new\":1}\n", 0},
		{"cut", "{\"a\":1}\n{\"b\":", "{\"a\":1}\n{\"new\":1}\n", 5},
		{"cut long", "{\"a\":1}\n" + strings.Repeat("x", 10_000), "{\"a\":1}\n{\"new\":1}\n", 10_000},
		{"only a cut line", strings.Repeat("y", 5_000), "{\"new\":1}\n", 5_000},
		{"empty", "", "{\"new\":1}\n", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "emf.log")
			must(t, os.WriteFile(path, []byte(c.in), 0o644))
			s, err := NewFileSink(FileConfig{Path: path})
			must(t, err)
			if got := s.CutTail(); got != c.cut {
				t.Errorf("CutTail %d, want %d", got, c.cut)
			}
			must(t, s.Write(context.Background(), []byte(`{"new":1}`)))
			must(t, s.Close(context.Background()))
			if b, err := os.ReadFile(path); err != nil || string(b) != c.want {
				t.Errorf("file %.60q, %v; want %q", b, err, c.want)
			}
		})
	}
}

// TestAWSSinksUnanswered: a document an AWS sink gives up on after a call
// that held it was sent whole and went unanswered (its attempt timed out,
// or a Flush ran out of time under it) is counted Unconfirmed as well as
// Dropped: CloudWatch may have taken it, and here it did. One the service
// refused, or that was answered, is not. Whatever reached the endpoint is
// counted Written or Unconfirmed, and every document counted Written
// reached it. Before, a lost answer was counted Dropped alone.
func TestAWSSinksUnanswered(t *testing.T) {
	const timeout = 500 * time.Millisecond // of a call, or of the flush
	type hooks struct {
		fail func(n int) (int, string)
		lose func(n int) bool
	}
	lost := func(int) bool { return true }
	for _, sink := range []struct {
		name    string
		refusal string
		open    func(t *testing.T, h hooks, edit func(*Throttle, *time.Duration)) sinkHarness
	}{
		{"logs", "InvalidParameterException", func(t *testing.T, h hooks, edit func(*Throttle, *time.Duration)) sinkHarness {
			return newLogsHarness(t, &logsServer{fail: h.fail, lose: h.lose}, func(o *LogsOptions) { edit(&o.Throttle, &o.FlushTimeout) })
		}},
		{"metric data", "InvalidParameterValue", func(t *testing.T, h hooks, edit func(*Throttle, *time.Duration)) sinkHarness {
			return newMetricDataHarness(t, &metricDataServer{fail: h.fail, lose: h.lose}, func(o *MetricDataOptions) { edit(&o.Throttle, &o.FlushTimeout) })
		}},
	} {
		refused := func(int) (int, string) { return 400, sink.refusal }
		for _, tc := range []struct {
			name   string
			hooks  hooks
			behind bool // the call outlasts the flush
			// written and unconfirmed of the 30 documents (unless behind);
			// copies of each that reach the endpoint
			written, unconfirmed uint64
			copies               int
		}{
			{"answered", hooks{}, false, 30, 0, 1},
			{"refused", hooks{fail: refused}, false, 0, 0, 0},
			{"answer lost, retried, lost", hooks{lose: lost}, false, 0, 30, 2},
			// Each batch's first call lost and its retry refused, however
			// the sender batches the documents.
			{"answer lost, then refused", hooks{lose: func(n int) bool { return n%2 == 1 }, fail: func(n int) (int, string) {
				if n%2 == 0 {
					return refused(n)
				}
				return 0, ""
			}}, false, 0, 30, 1},
			{"answer lost past the flush", hooks{lose: lost}, true, 0, 0, 0},
		} {
			t.Run(sink.name+"/"+tc.name, func(t *testing.T) {
				h := sink.open(t, tc.hooks, func(th *Throttle, flush *time.Duration) {
					th.MaxRetries, th.Timeout = 1, timeout
					if tc.behind {
						th.Timeout, *flush = time.Minute, timeout
					}
				})
				ctx := context.Background()
				var docs [][]byte
				for i := range 30 {
					docs = append(docs, conformanceDoc(0, i, 0))
					must(t, h.sink.Write(ctx, docs[i]))
				}
				if err := h.sink.Flush(ctx); tc.behind != errors.Is(err, ErrSinkBehind) || !tc.behind && err != nil {
					t.Errorf("flush: %v, want ErrSinkBehind %v", err, tc.behind)
				}
				must(t, h.sink.Close(ctx))
				st := h.sink.Stats()
				got := make(map[string]int)
				for _, d := range h.delivered(t) {
					got[d]++
				}
				// Every call sent whole reached the endpoint here: what
				// reached it is what the sink counts written or unconfirmed.
				if st.Written != tc.written || st.Dropped != 30-tc.written || st.Buffered != 0 || uint64(len(got)) != st.Written+st.Unconfirmed {
					t.Errorf("stats %+v, want %d written, %d dropped, %d unconfirmed: those that reached the endpoint", st, tc.written, 30-tc.written, len(got))
				}
				if tc.behind { // the call under the flush holds those taken before it: at least one
					if st.Unconfirmed == 0 {
						t.Errorf("stats %+v, want the documents of the call cut unconfirmed", st)
					}
					return
				}
				if st.Unconfirmed != tc.unconfirmed {
					t.Errorf("stats %+v, want %d unconfirmed", st, tc.unconfirmed)
				}
				for _, w := range h.want(docs) {
					if got[w] != tc.copies {
						t.Errorf("%s reached the endpoint %d times, want %d", w, got[w], tc.copies)
					}
				}
			})
		}
	}
}

// TestAWSSinksDown: a call to an endpoint that refuses the connection
// never sent its request, so the documents it held are Dropped and not
// Unconfirmed.
func TestAWSSinksDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	th := testThrottle(newThrottleClock())
	th.MaxRetries = 1
	logs, err := NewLogsSink(cloudwatchlogs.NewFromConfig(testAWSConfig(url)), LogsOptions{LogGroup: "emf", LogStream: "edge-1", Throttle: th})
	must(t, err)
	metrics, err := NewMetricDataSink(cloudwatch.NewFromConfig(testAWSConfig(url)), MetricDataOptions{Throttle: th})
	must(t, err)
	for _, s := range []Sink{logs, metrics} {
		ctx := context.Background()
		for i := range 30 {
			must(t, s.Write(ctx, conformanceDoc(0, i, 0)))
		}
		must(t, s.Close(ctx))
		if st := s.Stats(); st.Written != 0 || st.Dropped != 30 || st.Unconfirmed != 0 || st.Errors == 0 {
			t.Errorf("stats %+v, want 30 dropped, none unconfirmed, and errors", st)
		}
	}
}
