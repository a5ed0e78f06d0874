package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/dashboards"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// metricRef is one metric a dashboard or alarm reads, or one the
// aggregator emits: namespace, name and the sorted dimension keys.
type metricRef struct {
	Namespace, Name, Dims string
}

func ref(ns, name string, dims []string) metricRef {
	dims = slices.Clone(dims)
	slices.Sort(dims)
	return metricRef{ns, name, strings.Join(dims, ",")}
}

// emittedCatalogue runs `ratewarden aggregate --stdin --emf file:` on a
// day-like sample of decisions (every outcome, drops and feedback events,
// origin errors) and returns every (namespace, metric, dimension keys) its
// EMF documents declare.
func emittedCatalogue(t *testing.T) map[metricRef]bool {
	t.Helper()
	bin := buildBinary(t)
	// Recent: CloudWatch, and so the EMF writer, refuses older timestamps.
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	var in bytes.Buffer
	for _, d := range decisiontest.NewGenerator(11, start).Batch(20_000) {
		in.Write(append(decisions.AppendJSON(nil, &d), '\n'))
	}
	// The generator's drop reports are rare: one more makes sure.
	drop := decisions.Decision{Kind: decisions.KindDrops, Time: start.Add(time.Second), Node: "edge-1", Dropped: 3}
	in.Write(append(decisions.AppendJSON(nil, &drop), '\n'))
	out := filepath.Join(t.TempDir(), "emf.jsonl")
	cmd := exec.Command(bin, "aggregate", "--stdin", "--emf", "file:"+out)
	cmd.Stdin = &in
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("aggregate: %v\n%s", err, msg)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	cat := map[metricRef]bool{}
	for line := range bytes.Lines(raw) {
		var doc struct {
			AWS struct {
				CloudWatchMetrics []struct {
					Namespace  string
					Dimensions [][]string
					Metrics    []struct{ Name string }
				}
			} `json:"_aws"`
		}
		if err := json.Unmarshal(line, &doc); err != nil {
			t.Fatalf("EMF line %q: %v", line, err)
		}
		for _, d := range doc.AWS.CloudWatchMetrics {
			sets := d.Dimensions
			if len(sets) == 0 {
				sets = [][]string{nil}
			}
			for _, set := range sets {
				for _, m := range d.Metrics {
					cat[ref(d.Namespace, m.Name, set)] = true
				}
			}
		}
	}
	if len(cat) < 20 {
		t.Fatalf("the sample emitted only %d metrics: %v", len(cat), cat)
	}
	return cat
}

var (
	searchRE      = regexp.MustCompile(`SEARCH\('\{([^}]*)\}\s+MetricName="([^"]+)"`)
	anySearchRE   = regexp.MustCompile(`SEARCH\(`)
	anomalyBandRE = regexp.MustCompile(`ANOMALY_DETECTION_BAND\(\s*(\w+)`)
)

// dashboardRefs returns every metric a dashboard body reads: metric rows
// ([namespace, name, dimension, value, ..., {options}]) and SEARCH
// expressions ({namespace,dims...} MetricName="name"), and fails on what
// it cannot read.
func dashboardRefs(t *testing.T, name string, body []byte) (refs []metricRef, features map[string]int) {
	t.Helper()
	var b struct {
		Widgets []struct {
			Type       string
			Properties struct {
				Region  string
				Metrics [][]any
			}
		}
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	features = map[string]int{}
	for _, w := range b.Widgets {
		if w.Type != "metric" {
			continue
		}
		if w.Properties.Region == "" {
			t.Errorf("%s: a metric widget without a region", name)
		}
		ids := map[string]bool{}
		for _, row := range w.Properties.Metrics {
			var strs []string
			for _, x := range row {
				switch v := x.(type) {
				case string:
					strs = append(strs, v)
				case map[string]any:
					if id, ok := v["id"].(string); ok {
						ids[id] = true
					}
					e, _ := v["expression"].(string)
					if e == "" {
						continue
					}
					if anySearchRE.MatchString(e) {
						m := searchRE.FindStringSubmatch(e)
						if m == nil {
							t.Errorf("%s: SEARCH expression not understood: %s", name, e)
							continue
						}
						schema := strings.Split(m[1], ",")
						refs = append(refs, ref(schema[0], m[2], schema[1:]))
						features["search"]++
					}
					if m := anomalyBandRE.FindStringSubmatch(e); m != nil {
						features["anomaly"]++
						if !ids[m[1]] {
							t.Errorf("%s: %s names no metric of its widget", name, e)
						}
					}
					if strings.Contains(e, "/") {
						features["math"]++
					}
				default:
					t.Errorf("%s: metric row element %v of type %T", name, x, x)
				}
			}
			if len(strs) == 0 {
				continue
			}
			if len(strs)%2 != 0 {
				t.Errorf("%s: metric row %v: want namespace, name and dimension pairs", name, row)
				continue
			}
			var dims []string
			for i := 2; i < len(strs); i += 2 {
				dims = append(dims, strs[i])
			}
			refs = append(refs, ref(strs[0], strs[1], dims))
		}
	}
	return refs, features
}

func alarmRefs(a dashboards.Alarm) []metricRef {
	names := func(ds []dashboards.Dimension) (out []string) {
		for _, d := range ds {
			out = append(out, d.Name)
		}
		return out
	}
	var refs []metricRef
	if a.MetricName != "" {
		refs = append(refs, ref(a.Namespace, a.MetricName, names(a.Dimensions)))
	}
	for _, q := range a.Metrics {
		if q.MetricStat != nil {
			m := q.MetricStat.Metric
			refs = append(refs, ref(m.Namespace, m.MetricName, names(m.Dimensions)))
		}
	}
	return refs
}

// checkRefs reports every reference the catalogue lacks.
func checkRefs(cat map[metricRef]bool, where string, refs []metricRef) []string {
	var bad []string
	for _, r := range refs {
		if !cat[r] {
			bad = append(bad, fmt.Sprintf("%s reads %s %s dimensions [%s], which the aggregator does not emit", where, r.Namespace, r.Name, r.Dims))
		}
	}
	return bad
}

// TestDashboardsUseEmittedMetrics: every metric and dimension set the
// CloudWatch dashboards and alarms read is one the aggregator's EMF output
// for a sample log declares; the dashboards use SEARCH, metric math and an
// anomaly detection band; and a dashboard or alarm naming a metric or
// dimension set the aggregator does not emit is caught.
func TestDashboardsUseEmittedMetrics(t *testing.T) {
	cat := emittedCatalogue(t)
	for _, ns := range []string{"", "Shop/Edge"} {
		o := dashboards.CloudWatchOptions{Tiers: []string{"anonymous", "pro"}}
		if ns != "" {
			o.Namespace = ns
			// The catalogue's namespace is the default one.
			want := map[metricRef]bool{}
			for r := range cat {
				r.Namespace = ns
				want[r] = true
			}
			cat = want
		}
		feats := map[string]int{}
		for _, d := range dashboards.Dashboards(o) {
			refs, f := dashboardRefs(t, d.Name, d.Body)
			if len(refs) == 0 {
				t.Errorf("%s reads no metric", d.Name)
			}
			for k, n := range f {
				feats[k] += n
			}
			for _, msg := range checkRefs(cat, d.Name, refs) {
				t.Error(msg)
			}
		}
		if feats["search"] == 0 || feats["anomaly"] == 0 || feats["math"] == 0 {
			t.Errorf("namespace %q: SEARCH %d, anomaly bands %d, metric math %d: want each", ns, feats["search"], feats["anomaly"], feats["math"])
		}
		as := dashboards.Alarms(o)
		var names []string
		for _, a := range as {
			names = append(names, a.AlarmName)
			for _, msg := range checkRefs(cat, a.AlarmName, alarmRefs(a)) {
				t.Error(msg)
			}
		}
		if want := []string{"ratewarden-block-ratio-spike", "ratewarden-fail-open-surge", "ratewarden-pipeline-lag"}; !slices.Equal(names, want) {
			t.Errorf("alarms %v, want %v", names, want)
		}
	}

	// The check catches a wrong metric name, a wrong dimension set and a
	// wrong namespace.
	cat = emittedCatalogue(t)
	for _, c := range []struct{ from, to string }{
		{`"Blocked"`, `"Blockd"`},
		{`{Ratewarden,Tier,Rule}`, `{Ratewarden,Rule}`},
		{`["Ratewarden","Requests"`, `["Ratewarden","Requests","Path","/x"`},
	} {
		var bad int
		for _, d := range dashboards.Dashboards(dashboards.CloudWatchOptions{}) {
			body := bytes.ReplaceAll(d.Body, []byte(c.from), []byte(c.to))
			refs, _ := dashboardRefs(t, d.Name, body)
			bad += len(checkRefs(cat, d.Name, refs))
		}
		if bad == 0 {
			t.Errorf("replacing %s with %s went unnoticed", c.from, c.to)
		}
	}
	a := dashboards.Alarms(dashboards.CloudWatchOptions{})[2]
	a.Dimensions = []dashboards.Dimension{{Name: "Path", Value: "/x"}}
	if len(checkRefs(cat, a.AlarmName, alarmRefs(a))) == 0 {
		t.Error("an alarm on a dimension the aggregator does not emit went unnoticed")
	}
}
