package assemble_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
)

// loadConfig parses yaml with an origin that answers 200 as edge.upstream.
func loadConfig(t testing.TB, yaml string) *config.Config {
	t.Helper()
	origin := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(origin.Close)
	yaml = strings.ReplaceAll(yaml, "ORIGIN", origin.URL)
	cfg, err := config.Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// logEvents returns every event of the decision log in dir.
func logEvents(t testing.TB, dir string) []decisions.Decision {
	t.Helper()
	rd, err := decisionlog.Open(dir, decisionlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var ds []decisions.Decision
	for {
		d, _, err := rd.Next(context.Background(), false)
		if decisionlog.IsEnd(err) {
			return ds
		}
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
}

// TestEdgeRecordsThroughEveryConfiguredPart serves requests through an
// assembled Edge and reads the decision log back: the lists, the privacy
// setting and the node name reach the recorded decisions.
func TestEdgeRecordsThroughEveryConfiguredPart(t *testing.T) {
	dir := t.TempDir()
	deny := filepath.Join(dir, "deny.txt")
	if err := os.WriteFile(deny, []byte("192.0.2.66\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(dir, "log")
	cfg := loadConfig(t, `
edge:
  upstream: ORIGIN
  node: node-a
decisions:
  dir: `+logDir+`
  privacy:
    addresses: truncate
lists:
  deny_file: `+deny+`
`+anonymous)
	e, err := assemble.NewEdge(context.Background(), cfg, assemble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := e.Handler()
	var codes []int
	for _, addr := range []string{"192.0.2.7:1000", "192.0.2.7:1000", "192.0.2.7:1000", "192.0.2.66:1000"} {
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []int{200, 200, 429, 403}; !equal(codes, want) {
		t.Fatalf("statuses %v, want %v", codes, want)
	}
	var got []string
	for _, d := range logEvents(t, logDir) {
		if d.Kind == decisions.KindDecision {
			got = append(got, d.Outcome.String()+" "+d.ClientIP.String()+" "+d.Node)
		}
	}
	want := []string{"allow 192.0.2.0 node-a", "allow 192.0.2.0 node-a", "block 192.0.2.0 node-a", "deny_listed 192.0.2.0 node-a"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("decisions:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestEdgeFailureClosesWhatItOpened: a Kinesis spill directory that cannot
// be made fails the assembly (a missing file fails it earlier, in
// ReadInputs, before anything is opened), and the decision log it had
// already opened is closed (its directory lock released), so a second
// assembly can open it.
func TestEdgeFailureClosesWhatItOpened(t *testing.T) {
	dir := t.TempDir()
	spill := filepath.Join(dir, "spill")
	if err := os.WriteFile(spill, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_REGION", "us-east-1")
	yaml := `
edge: {upstream: ORIGIN}
decisions:
  dir: ` + filepath.Join(dir, "log") + `
  kinesis: {stream: decisions, spill_dir: ` + spill + `}
` + anonymous
	if _, err := assemble.NewEdge(context.Background(), loadConfig(t, yaml), assemble.Options{}); err == nil || !strings.Contains(err.Error(), "spill_dir") {
		t.Fatalf("err = %v, want a spill directory error", err)
	}
	cfg := loadConfig(t, "edge: {upstream: ORIGIN}\ndecisions: {dir: "+filepath.Join(dir, "log")+"}\n"+anonymous)
	e, err := assemble.NewEdge(context.Background(), cfg, assemble.Options{})
	if err != nil {
		t.Fatalf("the log stayed locked: %v", err)
	}
	e.Close(context.Background())
}

const anonymous = `
tiers:
  anonymous:
    global: {limit: 2, window: 1m}
`

func equal(a, b []int) bool { return slices.Equal(a, b) }
