package alerts_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/decisions/awstest"
)

// FuzzLoadState: whatever the state file holds, loading it either fails
// with an error or gives an engine that runs windows.
func FuzzLoadState(f *testing.F) {
	f.Add([]byte(`{"version":1,"window":60000000000,"series":{"a":null,"b":{"recent":[1,2],"seasonal":[1]}},"open":{"x":null}}`))
	f.Add([]byte(`{"version":1,"window":60000000000,"last":"2026-11-02T00:00:00Z","quiet":{"k":"2026-11-02T01:00:00Z"}}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`not json`))
	cfg := testConfig(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, alerts.StateFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := alerts.NewRunner(alerts.RunnerOptions{Engine: alerts.Options{Config: cfg.Alerts, Window: time.Minute}, StateDir: dir})
		if err != nil {
			return
		}
		for i := range 3 {
			p := aggregator.NewPartial(t0.Add(time.Duration(i)*time.Minute), time.Minute, 10)
			d := decisionOf(p.Start, "192.0.2.1", "anonymous:global", i)
			p.Update(&d)
			if err := r.Window(t.Context(), p); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestFollowSettles: following a store of partials (a directory, or a
// DynamoDB table on dynalite), a window runs only once a partial Settle
// windows later is stored (other partitions may still add to it); without
// following, every stored window runs. Gaps between stored windows run as
// empty windows.
func TestFollowSettles(t *testing.T) {
	t.Run("dir", func(t *testing.T) { testFollowSettles(t, &aggregator.PartialsDir{Dir: t.TempDir()}) })
	t.Run("table", func(t *testing.T) {
		dc := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) {
			o.BaseEndpoint = aws.String(awstest.Endpoint(t, awstest.DynamoDBEnv))
		})
		name := fmt.Sprint("alerts-follow-", time.Now().UnixNano())
		awstest.CreateTable(t, dc, aggregator.PartialsTableSpec(name))
		testFollowSettles(t, &aggregator.PartialsTable{API: dc, Table: name})
	})
}

func testFollowSettles(t *testing.T, dir interface {
	aggregator.Sink
	alerts.PartialsReader
}) {
	for _, m := range []int{0, 1, 2, 4, 5} {
		p := aggregator.NewPartial(t0.Add(time.Duration(m)*time.Minute), time.Minute, 10)
		d := decisionOf(p.Start, "192.0.2.1", "anonymous:global", 0)
		p.Update(&d)
		if err := dir.Write(t.Context(), "shard-0", aggregator.Output{Partial: p, From: uint64(m), To: uint64(m)}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(t)
	r, err := alerts.NewRunner(alerts.RunnerOptions{Engine: alerts.Options{Config: cfg.Alerts, Window: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // one pass, then the loop sees the end
	if err := r.Follow(ctx, alerts.FollowOptions{Partials: dir, Follow: true, Settle: 2}); err != nil {
		t.Fatal(err)
	}
	if got, want := r.Last(), t0.Add(2*time.Minute); !got.Equal(want) {
		t.Errorf("following ran up to %v, want %v (window 4 is the newest: 2 is the last settled)", got, want)
	}
	if err := r.Follow(t.Context(), alerts.FollowOptions{Partials: dir}); err != nil {
		t.Fatal(err)
	}
	st := r.Stats().Total
	if got := r.Last(); !got.Equal(t0.Add(5*time.Minute)) || st.Windows != 6 || st.Empty != 1 {
		t.Errorf("ran up to %v, %d windows (%d empty), want up to 5 minutes, 6 windows, 1 empty", got, st.Windows, st.Empty)
	}
}

// TestRunnerStatsRunAndTotal: a Runner resumed from a state counts what
// it ran itself (Run) apart from what the state counted since it began
// (Total, across runs), and says how many alerts are firing (Open), where
// its one set of engine counts began at the state's, so that a rerun that
// ran nothing reported the windows and alerts of the runs before it.
func TestRunnerStatsRunAndTotal(t *testing.T) {
	cfg := testConfig(t)
	dir := t.TempDir()
	newRunner := func() *alerts.Runner {
		r, err := alerts.NewRunner(alerts.RunnerOptions{Engine: alerts.Options{Config: cfg.Alerts, Window: time.Minute, Limits: alerts.RuleLimits(cfg)},
			StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Window i holds a scraper of its own: each raises a heavy hitter.
	window := func(r *alerts.Runner, i int) {
		p := aggregator.NewPartial(t0.Add(time.Duration(i)*time.Minute), time.Minute, 10)
		for j := range 700 {
			d := decisionOf(p.Start, addr(i), "anonymous:global", j)
			p.Update(&d)
		}
		if err := r.Window(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	open := func() int {
		st, err := alerts.LoadState(dir)
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Open)
	}

	first := newRunner()
	for i := range 5 {
		window(first, i)
	}
	// A save a kill cut short leaves its temporary file: the next runner
	// removes it, and the state is the last one saved.
	leftover := filepath.Join(dir, "."+alerts.StateFile+".2718281828.tmp")
	if err := os.WriteFile(leftover, []byte(`{"half`), 0o644); err != nil {
		t.Fatal(err)
	}
	s1 := first.Stats()
	if s1.Run != s1.Total || s1.Run.Windows != 5 || s1.Run.Firing < 5 || s1.Open != open() || s1.Open == 0 {
		t.Fatalf("a fresh state's runner: %+v; want Run = Total, 5 windows, 5 or more raised, %d open", s1, open())
	}

	second := newRunner()
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary file a save left is still there: %v", err)
	}
	if s := second.Stats(); s.Run != (alerts.Stats{}) || s.Total != s1.Total || s.Open != s1.Open {
		t.Errorf("resumed, before any window: %+v; want Run zero, Total and Open the first runner's", s)
	}
	window(second, 3) // seen before
	window(second, 4) // seen before
	window(second, 5)
	window(second, 6)
	s2 := second.Stats()
	if s2.Run.Windows != 2 || s2.Run.Skipped != 2 || s2.Run.Firing < 2 {
		t.Errorf("resumed: Run %+v; want 2 windows, 2 seen before, 2 or more raised", s2.Run)
	}
	want := s1.Total
	want.Windows += s2.Run.Windows
	want.Skipped += s2.Run.Skipped
	want.Firing += s2.Run.Firing
	want.Resolved += s2.Run.Resolved
	want.Suppressed += s2.Run.Suppressed
	want.Empty += s2.Run.Empty
	want.Evicted += s2.Run.Evicted
	if s2.Total != want || s2.Open != open() {
		t.Errorf("resumed: Total %+v, Open %d; want %+v, %d open", s2.Total, s2.Open, want, open())
	}
}
