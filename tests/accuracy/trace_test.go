package accuracy_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/tests/accuracy"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestGenerateIsDeterministic(t *testing.T) {
	a, err := accuracy.Generate(netShortTrace)
	if err != nil {
		t.Fatal(err)
	}
	b, err := accuracy.Generate(netShortTrace)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Requests, b.Requests) || !slices.Equal(a.Classes, b.Classes) {
		t.Error("two traces of one config differ")
	}
	other := netShortTrace
	other.Seed++
	c, err := accuracy.Generate(other)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(a.Requests, c.Requests) {
		t.Error("traces of two seeds are the same")
	}
}

// TestGenerateShape checks that each class sends what it stands for.
func TestGenerateShape(t *testing.T) {
	c := shortTrace
	tr, err := accuracy.Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	perID := make([]int, len(tr.Classes))
	nodes := make([]int, c.Nodes)
	for i, r := range tr.Requests {
		if i > 0 && r.At < tr.Requests[i-1].At {
			t.Fatalf("request %d at %v before request %d at %v", i, r.At, i-1, tr.Requests[i-1].At)
		}
		if r.At < 0 || r.At >= c.Duration {
			t.Fatalf("request %d at %v: want within [0, %v)", i, r.At, c.Duration)
		}
		perID[r.ID]++
		nodes[r.Node]++
	}
	limitRate := float64(c.Limit) / c.Window.Seconds()
	for id, cl := range tr.Classes {
		rate := float64(perID[id]) / c.Duration.Seconds()
		switch cl {
		case accuracy.Steady:
			if rate > c.SteadyLoad[1]*limitRate*1.1 {
				t.Errorf("steady identity %d: %.1f req/s, want at most about %.1f", id, rate, c.SteadyLoad[1]*limitRate)
			}
		case accuracy.Scraper:
			scraping := (c.ScraperUntil - c.ScraperFrom).Seconds()
			if got := float64(perID[id]) / scraping; got < 0.95*float64(c.ScraperRate) || got > 1.05*float64(c.ScraperRate) {
				t.Errorf("scraper: %.1f req/s while scraping, want about %v", got, c.ScraperRate)
			}
		}
	}
	for i, n := range nodes {
		if n < len(tr.Requests)/c.Nodes || n > len(tr.Requests)/c.Nodes+1 {
			t.Errorf("node %d: %d requests of %d, want a round robin share", i, n, len(tr.Requests))
		}
	}
	if got := []int{tr.Count(accuracy.Steady), tr.Count(accuracy.Bursty), tr.Count(accuracy.Scraper)}; slices.Contains(got, 0) {
		t.Errorf("requests per class: %v, want some of each", got)
	}
}

func TestGenerateRejects(t *testing.T) {
	bad := netShortTrace
	bad.Nodes = 0
	bad.SteadyLoad = [2]float64{0.9, 0.2}
	if _, err := accuracy.Generate(bad); err == nil {
		t.Error("Generate accepted 0 nodes and a steady load range upside down")
	}
}

func TestOracle(t *testing.T) {
	s := time.Second
	f := func(at []time.Duration, want []bool) {
		t.Helper()
		tr := &accuracy.Trace{Classes: []accuracy.Class{accuracy.Steady}}
		for _, a := range at {
			tr.Requests = append(tr.Requests, accuracy.Request{At: a})
		}
		if got := accuracy.Oracle(tr, 2, 10*s); !slices.Equal(got, want) {
			t.Errorf("Oracle(%v) = %v, want %v", at, got, want)
		}
	}
	f([]time.Duration{0, 1 * s, 2 * s}, []bool{true, true, false})
	// The first admission leaves the window (t − W, t] at exactly t = 10 s.
	f([]time.Duration{0, 1 * s, 10*s - 1, 10 * s, 10 * s}, []bool{true, true, false, true, false})
	// Refusals do not count: a client knocking all the time is let in as
	// soon as its own admissions age out.
	f([]time.Duration{0, 5 * s, 6 * s, 7 * s, 8 * s, 9 * s, 10 * s, 14 * s, 15 * s}, []bool{true, true, false, false, false, false, true, false, true})
}

// TestMarkdown checks the table's format against testdata/table.md.
func TestMarkdown(t *testing.T) {
	r := &accuracy.Result{
		Trace: "t", Store: "memory", Algorithm: limit.SlidingWindow, Mode: accuracy.Batched, Skew: 50 * time.Millisecond,
		Limit: 800, MaxError: 0.01, Nodes: 4, Requests: 10000, Allowed: 9000, WronglyAllowed: 3, WronglyRefused: 12,
		Writes: 2500, ScraperRequests: 4000, ScraperWrites: 100, MaxOverAligned: 6, MaxOverSliding: 120,
		ByClass: [3]accuracy.ClassResult{
			{Requests: 5000, OracleAllowed: 5000, Allowed: 5000},
			{Requests: 1000, OracleAllowed: 800, Allowed: 805, WronglyAllowed: 3, WronglyRefused: 2},
			{Requests: 4000, OracleAllowed: 200, Allowed: 190, WronglyRefused: 10},
		},
	}
	exact := *r
	exact.Mode, exact.Skew, exact.MaxError = accuracy.Exact, 0, 0
	got := accuracy.AppendMarkdown(nil, []*accuracy.Result{&exact, r})
	golden := filepath.Join("testdata", "table.md")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("table:\n%s\nwant (%s, regenerate with -update):\n%s", got, golden, want)
	}
}
