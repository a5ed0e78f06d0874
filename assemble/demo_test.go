package assemble

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions/decisionlog"
)

// TestDemoSpeed: at --speed 5 the story's minute runs on the accelerated
// clock: the loop is shown (RunDemo's own check passes), the output says
// its times are story time, and the decisions in the log are stamped in
// story time, spanning about speed times the wall time the run took.
func TestDemoSpeed(t *testing.T) {
	const speed = 5 // at 10 the list has about a wall second left to act under -race on 2 busy cores
	dir := t.TempDir()
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
