package assemble

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions/decisionlog"
)

// TestDemoSpeed: at --speed 5 the story's minute runs on the accelerated
// clock: the loop is shown (RunDemo's own check passes), the output says
// its times are story time, and the decisions in the log are stamped in
// story time, spanning at most speed times the wall time the run took
// (less when the story waited for the aggregator, as it does on a busy
// machine, at any speed).
func TestDemoSpeed(t *testing.T) {
	const speed = 5
	dir := filepath.Join(t.TempDir(), "new", "demo") // --dir of a directory that does not exist yet
	var out bytes.Buffer
	wallStart := time.Now()
	err := RunDemo(context.Background(), DemoOptions{Duration: time.Minute, Speed: speed, Dir: dir, Out: &out})
	wall := time.Since(wallStart)
	text := out.String()
	if err != nil {
		t.Fatalf("demo at speed %d: %v\n%s", speed, err, text)
	}
	if !strings.Contains(text, "demo: the loop was shown") || !strings.Contains(text, fmt.Sprintf("story time runs %d times as fast", speed)) {
		t.Errorf("output:\n%s", text)
	}
	r, err := decisionlog.Open(filepath.Join(dir, "decision-log"), decisionlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var first, last time.Time
	n := 0
	for {
		d, _, err := r.Next(context.Background(), false)
		if decisionlog.IsEnd(err) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if first.IsZero() || d.Time.Before(first) {
			first = d.Time
		}
		if d.Time.After(last) {
			last = d.Time
		}
	}
	// The traffic runs 60 s of story time: decisions span close to that,
	// and no more than speed × the wall time of the whole run.
	span := last.Sub(first)
	if n == 0 || span < 50*time.Second || span > time.Duration(speed)*wall {
		t.Errorf("%d decisions over %v of story time, in %v of wall time at speed %d\n%s", n, span, wall, speed, text)
	}
	t.Logf("%d decisions over %v of story time in %v of wall time\n%s", n, span, wall, text)
}

// TestDemoServeStops: when serve stops during the story (its aggregator
// cannot write a partial: the directory of the day's 5 s windows is a
// file), the demo stops with serve's error rather than wait for an
// aggregator that is gone.
func TestDemoServeStops(t *testing.T) {
	dir := t.TempDir()
	windows := filepath.Join(dir, "partials", "5s")
	if err := os.MkdirAll(windows, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, day := range []time.Time{time.Now(), time.Now().Add(24 * time.Hour)} {
		if err := os.WriteFile(filepath.Join(windows, day.UTC().Format(time.DateOnly)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	err := RunDemo(context.Background(), DemoOptions{Duration: time.Minute, Speed: 5, Dir: dir, Out: &out})
	if err == nil || !strings.Contains(err.Error(), "aggregator stopped") {
		t.Errorf("RunDemo = %v, want the aggregator's error\n%s", err, out.String())
	}
}

// stuckWindows is the demo's output with the windows' sink stuck: a
// window's line blocks its writer (the aggregator) until release is
// closed. The rest is kept.
type stuckWindows struct {
	release chan struct{}
	mu      sync.Mutex
	b       bytes.Buffer
}

func (w *stuckWindows) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("  decisions ")) {
		<-w.release
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *stuckWindows) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestDemoStuckAggregator: an aggregator stuck in a sink (here the window
// lines' writer) holds the story; the demo stops once it has waited Stall,
// gives serve the edge's shutdown grace, and fails naming the aggregator,
// where it waited for it until interrupted.
func TestDemoStuckAggregator(t *testing.T) {
	out := &stuckWindows{release: make(chan struct{})}
	defer close(out.release) // the stuck aggregator, and serve, end after the test
	const stall = 2 * time.Second
	start := time.Now()
	err := RunDemo(context.Background(), DemoOptions{Duration: time.Minute, Speed: 10, Stall: stall, Out: out})
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "the aggregator did not catch up with the edge's decisions for 2s") {
		t.Fatalf("RunDemo = %v after %v, want the stall named\n%s", err, took, out.String())
	}
	if strings.Contains(out.String(), "what the edge answered") {
		t.Errorf("the demo went on to its summary:\n%s", out.String())
	}
	t.Logf("stopped after %v: %v", took, err)
}

// TestDemoDirOfAnEarlierRun: a --dir an earlier run wrote to (its decision
// log or state) is refused, naming what it holds. Before, the run went on
// beside the earlier run's alert state, which already held the scraper's
// alert: no alert was raised, nothing was listed, and the demo failed
// saying "give it --duration 60s or more".
func TestDemoDirOfAnEarlierRun(t *testing.T) {
	for _, held := range []string{"decision-log", "state"} {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, held), 0o755); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := RunDemo(context.Background(), DemoOptions{Duration: time.Minute, Speed: 20, Dir: dir, Out: &out})
		want := "demo: --dir " + dir + " holds an earlier run's " + held
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("RunDemo with %s = %v, want %q", held, err, want)
		}
	}
}
