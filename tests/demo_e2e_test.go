package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge/lists"
)

// TestDemo runs `ratewarden demo --duration 60s` as a newcomer would and
// checks, from its output and the files it keeps (--dir), that it showed
// the whole loop and exited 0 for it: a line per window; the scraper
// challenged, then blocked, by its limits; a heavy_hitter alert naming
// it; the challenge list holding it, written by the challenge-scrapers
// policy; its requests challenged by the list (the decision log's
// "challenge list" decisions); one challenge/add feedback event for it,
// recorded by the edge, per entry the policy applied (one, or two when
// its global and path rules alert in successive windows and the second
// entry outlives the first by a window); the credential-stuffing alert; the users
// never refused; the origin kept far below the scraper's rate; and the
// abuse report printed at the end naming the scraper's alert.
func TestDemo(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	out, err := exec.Command(bin, "demo", "--duration", "60s", "--dashboard-listen", "off", "--dir", dir).CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, text)
	}
	num := func(re string) int {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("output lacks %s:\n%s", re, text)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	const scraper = "203.0.113.7"
	if n := strings.Count(text, "  decisions "); n < 10 {
		t.Errorf("%d window lines, want one every 5 s:\n%s", n, text)
	}
	if !strings.Contains(text, "most refused "+scraper) || !strings.Contains(text, "demo: the loop was shown") {
		t.Errorf("no window names the scraper, or the loop is not said to be shown:\n%s", text)
	}
	// Its limits first: the global rule's 60 a minute pass, up to twice
	// that are challenged, the rest blocked; then the list challenges it.
	if num(`scraper +sent \d+: ok (\d+)`) < 50 || num(`scraper +sent \d+: ok \d+, challenged (\d+)`) < 60 || num(`scraper +sent \d+: .*blocked (\d+)`) < 100 {
		t.Errorf("the scraper was not let through, challenged and blocked:\n%s", text)
	}
	if num(`first challenged by the list \S+ \((\d+) requests since\)`) == 0 {
		t.Errorf("no request of the scraper was challenged after the listing:\n%s", text)
	}
	// A request still in flight when the run ends has no answer: the
	// users' answers are all 200, not one answer each.
	if num(`users +sent \d+: ok (\d+)`) == 0 || num(`users +sent \d+: ok \d+, challenged (\d+)`) != 0 || num(`users +sent \d+: .*blocked (\d+)`) != 0 ||
		num(`users +sent \d+: .*other (\d+)`) != 0 {
		t.Errorf("users were refused:\n%s", text)
	}
	if num(`stuffing +sent \d+: .*401 (\d+)`) == 0 {
		t.Errorf("no credential stuffing reached the origin:\n%s", text)
	}
	if peak := num(`at most (\d+) in one second`); peak == 0 || peak > 400 {
		t.Errorf("the origin saw %d requests in its busiest second, want well under the scraper's 800", peak)
	}

	// The alerts file: the scraper's heavy_hitter and the stuffing's alert.
	b, err := os.ReadFile(filepath.Join(dir, "alerts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var hh []alerts.Alert
	stuffing := false
	applied := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var a alerts.Alert
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if a.Kind == "action" {
			var ac alerts.Action
			if err := json.Unmarshal([]byte(line), &ac); err != nil {
				t.Fatalf("%v: %s", err, line)
			}
			if ac.Applied && ac.Target == scraper {
				applied++
			}
		}
		if a.Kind != "alert" || a.State != alerts.Firing {
			continue
		}
		switch a.Type {
		case alerts.TypeHeavyHitter:
			if len(a.Identities) == 1 && a.Identities[0] == scraper {
				hh = append(hh, a)
			}
		case alerts.TypeCredentialStuffing:
			stuffing = true
		}
	}
	if len(hh) == 0 || !stuffing {
		t.Fatalf("heavy_hitter alerts for the scraper %d, credential_stuffing %v:\n%s", len(hh), stuffing, b)
	}
	// The report names it (in a code span, as Markdown reports write
	// alert keys).
	if !strings.Contains(text, "`"+hh[0].Key+"`") || !strings.Contains(text, "# ratewarden demo: abuse report") {
		t.Errorf("the report does not name the alert %s:\n%s", hh[0].Key, text)
	}

	// The challenge list holds the scraper, written by the policy.
	f, err := os.Open(filepath.Join(dir, "challenge.list"))
	if err != nil {
		t.Fatal(err)
	}
	es, err := lists.ParseEntries(f, "challenge.list", lists.Challenge)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, e := range es {
		listed = listed || e.Target == scraper && e.By == "policy:challenge-scrapers" && !e.Expires.IsZero()
	}
	if !listed {
		t.Errorf("the challenge list lacks the scraper by policy:challenge-scrapers: %+v", es)
	}

	// The decision log: one feedback event for it, and its requests
	// challenged by the list.
	var feedback []string
	byList := 0
	for _, line := range strings.Split(strings.TrimSpace(runBinary(t, bin, nil, "decisions", "cat", "--dir", filepath.Join(dir, "decision-log"))), "\n") {
		d, _, err := decisions.ParseJSON([]byte(line))
		if err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		switch {
		case d.Kind == decisions.KindFeedback && d.Target == scraper:
			feedback = append(feedback, d.List+"/"+d.Action+" by "+d.Node)
		case d.Outcome == decisions.Challenge && d.ClientIP.String() == scraper && d.Reason == "challenge list":
			byList++
		}
	}
	want := strings.Repeat(", challenge/add by policy:challenge-scrapers", applied)
	if got := strings.Join(feedback, ", "); applied == 0 || applied > 2 || got != strings.TrimPrefix(want, ", ") {
		t.Errorf("feedback events for the scraper: %q, want one challenge/add by policy:challenge-scrapers per entry applied (%d)", got, applied)
	}
	if byList == 0 {
		t.Error("the decision log holds no request of the scraper challenged by the list")
	}
}
