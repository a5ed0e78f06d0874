package aggregator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	emf "github.com/ratewarden/ratewarden/embedded-metrics"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// encodeDocuments encodes a partial's documents as JSON lines.
func encodeDocuments(t *testing.T, opts EMFOptions, out Output) []byte {
	t.Helper()
	var b []byte
	for _, d := range Documents(opts, "log", out) {
		var err error
		if b, err = emf.AppendDocuments(b, &d, emf.Limits{IgnoreTimestampWindow: true}); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestDocumentsGolden: the documents of a fixed window of generated
// traffic, compared with testdata/emf/window.jsonl (-update rewrites it);
// every line passes the EMF validator, and the Requests of every
// dimension set add up to the window's decisions.
func TestDocumentsGolden(t *testing.T) {
	p := NewPartial(t0, time.Minute, 10)
	var originErrors float64
	for _, d := range decisiontest.NewGenerator(4, t0).Batch(3000) {
		p.Update(&d)
		if strings.HasPrefix(d.ResponseError, "upstream_") {
			originErrors++
		}
	}
	out := Output{Partial: p, From: 0, To: 2999}
	got := encodeDocuments(t, EMFOptions{Source: "test", RuleBudget: 8}, out)
	golden := filepath.Join("testdata", "emf", "window.jsonl")
	if *update {
		os.MkdirAll(filepath.Dir(golden), 0o755)
		os.WriteFile(golden, got, 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("documents differ from %s (run with -update after checking)", golden)
	}
	sums := map[string]float64{} // Requests by dimension keys
	for i, line := range bytes.Split(bytes.TrimSpace(got), []byte("\n")) {
		if vs := emf.Validate(line, t0, emf.ValidateOptions{}); len(vs) > 0 {
			t.Errorf("line %d: %v", i+1, vs)
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		dims := m["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Dimensions"].([]any)
		key := "[]"
		if len(dims) > 0 {
			b, _ := json.Marshal(dims[0])
			key = string(b)
		}
		if m["rw_key"] != fmt.Sprintf("test/log/%d/0-2999", t0.UnixMilli()) {
			t.Fatalf("line %d: rw_key %v", i+1, m["rw_key"])
		}
		if v, ok := m["Requests"].(float64); ok {
			sums[key] += v
		}
		if v, ok := m["OriginErrors"].(float64); ok && key == "[]" {
			sums["origin"] += v
		}
	}
	total := float64(p.Counts.Total())
	for _, key := range []string{`[]`, `["Tier"]`, `["Outcome"]`, `["Node"]`} {
		if sums[key] != total {
			t.Errorf("Requests by %s add up to %v, the window holds %v decisions", key, sums[key], total)
		}
	}
	if originErrors == 0 || sums["origin"] != originErrors {
		t.Errorf("service-wide OriginErrors %v, the window's events have %v", sums["origin"], originErrors)
	}
	if sums[`["Tier","Rule"]`] == 0 || sums[`["Tier","Rule"]`] > total {
		t.Errorf("Requests by tier and rule add up to %v of %v", sums[`["Tier","Rule"]`], total)
	}
}

// TestDocumentsDeterministic: the same output gives the same bytes, and a
// correction says so in its key's companion property.
func TestDocumentsDeterministic(t *testing.T) {
	p := NewPartial(t0, time.Minute, 10)
	for _, d := range decisiontest.NewGenerator(6, t0).Batch(500) {
		p.Update(&d)
	}
	a := encodeDocuments(t, EMFOptions{}, Output{Partial: p, From: 3, To: 9})
	b := encodeDocuments(t, EMFOptions{}, Output{Partial: p, From: 3, To: 9})
	if !bytes.Equal(a, b) {
		t.Fatal("two encodings of one output differ")
	}
	c := encodeDocuments(t, EMFOptions{}, Output{Partial: p, From: 3, To: 9, Correction: true})
	if !bytes.Contains(c, []byte(`"rw_correction":"true"`)) || bytes.Contains(a, []byte(`rw_correction`)) {
		t.Error("only a correction carries rw_correction")
	}
}

// TestDocumentsOfHostileNames: tier, rule and node names that EMF would
// refuse as dimension values (non-ASCII, control bytes, blank, too long)
// still give valid documents, so a name cannot wedge the aggregator on an
// output it can never deliver.
func TestDocumentsOfHostileNames(t *testing.T) {
	p := NewPartial(t0, time.Minute, 10)
	for _, n := range []struct{ tier, rule, node string }{
		{"tëst", "tëst:/api/caf\u00e9", "ноде-1"},
		{"bad\x00tier", "r\nule", "   "},
		{"", "", strings.Repeat("n", 2000)},
	} {
		d := decisions.Decision{Time: t0, Tier: n.tier, Rule: n.rule, Node: n.node, Outcome: decisions.Block,
			ClientIP: netip.MustParseAddr("192.0.2.1")}
		p.Update(&d)
	}
	b := encodeDocuments(t, EMFOptions{}, Output{Partial: p, To: 2})
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) < 8 {
		t.Fatalf("%d documents", len(lines))
	}
	for i, line := range lines {
		if vs := emf.Validate(line, t0, emf.ValidateOptions{}); len(vs) > 0 {
			t.Errorf("line %d: %v\n%s", i+1, vs, line)
		}
	}
	if !bytes.Contains(b, []byte(`"Tier":"t%C3%ABst"`)) {
		t.Errorf("non-ASCII tier not percent-encoded:\n%s", b)
	}
}

// downSink is an EMF sink whose every write fails.
type downSink struct{}

func (downSink) Write(context.Context, []byte) error { return errors.New("agent away") }
func (downSink) Flush(context.Context) error         { return nil }
func (downSink) Close(context.Context) error         { return nil }
func (downSink) Stats() emf.SinkStats                { return emf.SinkStats{} }

// TestEMFSinkSkipsWhatCanNeverBeValid: a document the specification
// refuses is counted and skipped, since a retry would refuse it again and
// hold the aggregator on that output for ever; a sink that fails fails the
// write, so that the output is delivered again.
func TestEMFSinkSkipsWhatCanNeverBeValid(t *testing.T) {
	p := NewPartial(t0, time.Minute, 10)
	d := decisions.Decision{Time: t0, Tier: "anonymous", Outcome: decisions.Allow, ClientIP: netip.MustParseAddr("192.0.2.1")}
	p.Update(&d)
	out := Output{Partial: p}
	now := func() time.Time { return t0 }
	w, _ := emf.NewWriter(emf.WriterOptions{}, emf.NewStdoutSink(io.Discard))
	bad := &EMFSink{W: w, Opts: EMFOptions{Namespace: "a namespace\x00with a NUL"}, Now: now}
	if err := bad.Write(context.Background(), "log", out); err != nil {
		t.Fatalf("an invalid document failed the write: %v", err)
	}
	if w.Stats().Rejected == 0 {
		t.Fatal("the invalid documents were not counted")
	}
	down, _ := emf.NewWriter(emf.WriterOptions{}, downSink{})
	if err := (&EMFSink{W: down, Now: now}).Write(context.Background(), "log", out); err == nil {
		t.Fatal("a failing sink did not fail the write")
	}
}

// TestDocumentsResolution: the metrics of 1 s and 10 s windows are
// high-resolution (StorageResolution 1 on every metric of every
// document), or CloudWatch would fold a minute's windows into one
// datapoint; those of 1 min and longer windows say nothing (standard).
// Every document passes the validator either way.
func TestDocumentsResolution(t *testing.T) {
	f := func(size time.Duration, high bool) {
		t.Helper()
		p := NewPartial(t0, size, 10)
		for _, d := range decisiontest.NewGenerator(8, t0).Batch(400) {
			d.Time = t0 // every event in the window, however short
			p.Update(&d)
		}
		b := encodeDocuments(t, EMFOptions{RuleBudget: 3}, Output{Partial: p, To: 399})
		lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
		metrics := 0
		for i, line := range lines {
			if vs := emf.Validate(line, t0, emf.ValidateOptions{}); len(vs) > 0 {
				t.Errorf("%v: line %d: %v", size, i+1, vs)
			}
			var doc struct {
				AWS struct {
					CloudWatchMetrics []struct {
						Metrics []struct {
							Name              string
							StorageResolution *int
						}
					}
				} `json:"_aws"`
			}
			if err := json.Unmarshal(line, &doc); err != nil {
				t.Fatal(err)
			}
			for _, m := range doc.AWS.CloudWatchMetrics[0].Metrics {
				metrics++
				if got := m.StorageResolution != nil && *m.StorageResolution == 1; got != high {
					t.Errorf("%v: line %d: %s has StorageResolution %v, want high resolution %v", size, i+1, m.Name, m.StorageResolution, high)
				}
			}
		}
		if len(lines) < 8 || metrics < 50 {
			t.Fatalf("%v: %d documents, %d metrics", size, len(lines), metrics)
		}
	}
	f(time.Second, true)
	f(10*time.Second, true)
	f(time.Minute, false)
	f(5*time.Minute, false)
}
