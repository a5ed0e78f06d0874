package emf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// specNow is the time of the specification's example document.
var specNow = time.UnixMilli(1574109732004)

func TestValidateSpecExamples(t *testing.T) {
	valid, _ := filepath.Glob("testdata/validate/valid/*.json")
	invalid, _ := filepath.Glob("testdata/validate/invalid/*.json")
	if len(valid) == 0 || len(invalid) == 0 {
		t.Fatal("no test documents in testdata/validate")
	}
	for _, path := range valid {
		t.Run(filepath.Base(path), func(t *testing.T) {
			doc, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if vs := Validate(doc, specNow, ValidateOptions{}); len(vs) != 0 {
				t.Errorf("valid document has violations:\n%s", joinViolations(vs))
			}
		})
	}
	for _, path := range invalid {
		t.Run(filepath.Base(path), func(t *testing.T) {
			doc, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			vs := Validate(doc, specNow, ValidateOptions{})
			if len(vs) == 0 {
				t.Fatal("invalid document passed")
			}
			golden := strings.TrimSuffix(strings.TrimPrefix(path, "testdata/"), ".json") + ".golden"
			checkGolden(t, golden, []byte(joinViolations(vs)))
		})
	}
}

func joinViolations(vs []Violation) string {
	var b strings.Builder
	for _, v := range vs {
		b.WriteString(v.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// doc builds a document with one directive from parts, so table cases
// state only what they change.
func doc(t *testing.T, directive map[string]any, root map[string]any) []byte {
	t.Helper()
	d := map[string]any{"Namespace": "MyApp", "Dimensions": [][]string{{}}, "Metrics": []any{}}
	for k, v := range directive {
		if v == nil {
			delete(d, k)
			continue
		}
		d[k] = v
	}
	r := map[string]any{"_aws": map[string]any{"Timestamp": specNow.UnixMilli(), "CloudWatchMetrics": []any{d}}}
	for k, v := range root {
		r[k] = v
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func numbers(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i)
	}
	return out
}

func defs(names []string) []any {
	out := make([]any, len(names))
	for i, n := range names {
		out[i] = map[string]any{"Name": n}
	}
	return out
}

func fill(names []string, v any) map[string]any {
	m := map[string]any{}
	for _, n := range names {
		m[n] = v
	}
	return m
}

func TestValidateLimits(t *testing.T) {
	m := "$._aws.CloudWatchMetrics[0]"
	cases := []struct {
		name      string
		directive map[string]any
		root      map[string]any
		opts      ValidateOptions
		now       time.Time
		want      []string // "path: problem-prefix" of every violation, in order
	}{
		{"100 metrics", map[string]any{"Metrics": defs(keys("m", 100))}, fill(keys("m", 100), 1), ValidateOptions{}, specNow, nil},
		{"101 metrics", map[string]any{"Metrics": defs(keys("m", 101))}, fill(keys("m", 101), 1), ValidateOptions{}, specNow,
			[]string{m + ".Metrics: has 101 metric definitions"}},
		{"30 dimension keys", map[string]any{"Dimensions": [][]string{keys("d", 30)}}, fill(keys("d", 30), "v"), ValidateOptions{}, specNow, nil},
		{"31 dimension keys", map[string]any{"Dimensions": [][]string{keys("d", 31)}}, fill(keys("d", 31), "v"), ValidateOptions{}, specNow,
			[]string{m + ".Dimensions[0]: has 31 keys"}},
		{"100 values", map[string]any{"Metrics": defs([]string{"v"})}, map[string]any{"v": numbers(100)}, ValidateOptions{}, specNow, nil},
		{"101 values", map[string]any{"Metrics": defs([]string{"v"})}, map[string]any{"v": numbers(101)}, ValidateOptions{}, specNow,
			[]string{"$.v: has 101 values"}},
		{"dimension value 1024", map[string]any{"Dimensions": [][]string{{"d"}}}, map[string]any{"d": strings.Repeat("x", 1024)}, ValidateOptions{}, specNow, nil},
		{"dimension value 1025", map[string]any{"Dimensions": [][]string{{"d"}}}, map[string]any{"d": strings.Repeat("x", 1025)}, ValidateOptions{}, specNow,
			[]string{"$.d: is 1025 characters long"}},
		{"dimension key 250", map[string]any{"Dimensions": [][]string{{strings.Repeat("k", 250)}}}, map[string]any{strings.Repeat("k", 250): "v"}, ValidateOptions{}, specNow, nil},
		{"dimension key 251", map[string]any{"Dimensions": [][]string{{strings.Repeat("k", 251)}}}, map[string]any{strings.Repeat("k", 251): "v"}, ValidateOptions{}, specNow,
			[]string{m + ".Dimensions[0][0]: is 251 characters long"}},
		{"metric name 1024", map[string]any{"Metrics": defs([]string{strings.Repeat("é", 1024)})}, map[string]any{strings.Repeat("é", 1024): 1}, ValidateOptions{}, specNow, nil},
		{"metric name 1025", map[string]any{"Metrics": defs([]string{strings.Repeat("é", 1025)})}, map[string]any{strings.Repeat("é", 1025): 1}, ValidateOptions{}, specNow,
			[]string{m + ".Metrics[0].Name: is 1025 characters long"}},
		{"namespace 255", map[string]any{"Namespace": strings.Repeat("n", 255)}, nil, ValidateOptions{}, specNow, nil},
		{"namespace 256", map[string]any{"Namespace": strings.Repeat("n", 256)}, nil, ValidateOptions{}, specNow,
			[]string{m + ".Namespace: is 256 characters long"}},
		{"namespace of AWS services", map[string]any{"Namespace": "AWS/Lambda"}, nil, ValidateOptions{}, specNow,
			[]string{m + `.Namespace: starts with "AWS/", which CloudWatch keeps for AWS services`}},
		{"namespace like AWS's", map[string]any{"Namespace": "aws/lambda"}, nil, ValidateOptions{}, specNow, nil},
		{"timestamp 14 days old", nil, nil, ValidateOptions{}, specNow.Add(MaxTimestampPast), nil},
		{"timestamp 14 days and 1 ms old", nil, nil, ValidateOptions{}, specNow.Add(MaxTimestampPast + time.Millisecond),
			[]string{"$._aws.Timestamp: is 1574109732004"}},
		{"timestamp window ignored", nil, nil, ValidateOptions{IgnoreTimestampWindow: true}, specNow.Add(365 * 24 * time.Hour), nil},
		{"timestamp 2 hours ahead", nil, nil, ValidateOptions{}, specNow.Add(-MaxTimestampFuture), nil},
		{"timestamp 2 hours and 1 ms ahead", nil, nil, ValidateOptions{}, specNow.Add(-MaxTimestampFuture - time.Millisecond),
			[]string{"$._aws.Timestamp: is 1574109732004"}},
		{"size over limit", map[string]any{"Metrics": defs([]string{"v"})}, map[string]any{"v": 1, "blob": strings.Repeat("b", 300)}, ValidateOptions{MaxSize: 256}, specNow,
			[]string{"$: document is "}},
		{"every unit", map[string]any{"Metrics": unitDefs()}, fill(unitNames(), 1), ValidateOptions{}, specNow, nil},
		{"missing directive members", map[string]any{"Namespace": nil, "Dimensions": nil, "Metrics": nil}, nil, ValidateOptions{}, specNow,
			[]string{m + ".Namespace: is missing", m + ".Dimensions: is missing", m + ".Metrics: is missing"}},
		{"value range edges", map[string]any{"Metrics": defs([]string{"a", "b", "c", "d"})},
			map[string]any{"a": 1.174271e+108, "b": -8.515920e-109, "c": 1.2e+108, "d": 1e-109}, ValidateOptions{}, specNow,
			[]string{"$.c: is 1.2e+108, out of range", "$.d: is 1e-109, out of range"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vs := Validate(doc(t, c.directive, c.root), c.now, c.opts)
			if len(vs) != len(c.want) {
				t.Fatalf("got %d violations, want %d:\n%s", len(vs), len(c.want), joinViolations(vs))
			}
			for i, v := range vs {
				if got := v.Path + ": " + v.Problem; !strings.HasPrefix(got, c.want[i]) || v.Allowed == "" {
					t.Errorf("violation %d = %q, want prefix %q and an allowed text", i, v, c.want[i])
				}
			}
		})
	}
}

func unitNames() []string {
	out := make([]string, len(units))
	for i, u := range units {
		out[i] = "m" + strconv.Itoa(i)
		_ = u
	}
	return out
}

func unitDefs() []any {
	out := make([]any, len(units))
	for i, u := range units {
		out[i] = map[string]any{"Name": "m" + strconv.Itoa(i), "Unit": string(u)}
	}
	return out
}

func TestViolationString(t *testing.T) {
	v := Violation{Path: "$.x", Problem: "is a string", Allowed: "a number"}
	if got, want := v.String(), "$.x: is a string; allowed: a number"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestMemberPath(t *testing.T) {
	cases := map[string]string{"Tier": "$.Tier", "A.a": `$["A.a"]`, "": `$[""]`, "x1": "$.x1", "1x": `$["1x"]`, `q"`: `$["q\""]`}
	for name, want := range cases {
		if got := memberPath(name); got != want {
			t.Errorf("memberPath(%q) = %s, want %s", name, got, want)
		}
	}
}
