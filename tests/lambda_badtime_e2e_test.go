package tests

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestLambdaAggregateBadTime: the built `lambda --aggregate` skips an
// event of the zero time and one of the last window of int64
// nanoseconds, says so on its invocation line ("bad_time":2), and writes
// no window for them: the invocation's partials are the one window of
// the other eighteen.
func TestLambdaAggregateBadTime(t *testing.T) {
	bin := buildBinary(t)
	_, ev := readKinesisEvent(t)
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	ds := allowed(t0, 20, time.Second, func(int) netip.Addr { return netip.MustParseAddr("203.0.113.7") })
	ds[3].Time, ds[11].Time = time.Time{}, decisions.MaxTime
	payload := oneRecordEvent(t, ev, ds)
	partials := t.TempDir()
	f := startLambda(t, bin, "--aggregate", "--partials", "dir:"+partials, "--ignore-time")
	if fails := batchItemFailures(t, f.invoke(t, payload)); len(fails) != 0 {
		t.Fatalf("batch item failures %v\n%s", fails, readFile(t, f.stderr))
	}
	stderr := string(readFile(t, f.stderr))
	if !strings.Contains(stderr, `"bad_time":2`) {
		t.Errorf("the invocation line does not say bad_time 2:\n%s", stderr)
	}
	ps := readPartials(t, partials, time.Minute)
	if p := ps[t0]; len(ps) != 1 || p == nil || p.Counts.Total() != 18 {
		t.Fatalf("%d windows (%v), want one at %v of 18 decisions", len(ps), ps, t0)
	}
}
