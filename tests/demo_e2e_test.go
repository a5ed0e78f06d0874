package tests

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemo runs `ratewarden demo` as a newcomer would (fast): it exits 0,
// prints a line per window, shows the scraper challenged and then blocked
// while the users pass, the credential stuffing reaching the origin (no
// per-address limit catches it), and the origin kept far below the
// scraper's rate.
func TestDemo(t *testing.T) {
	bin := buildBinary(t)
	out, err := exec.Command(bin, "demo", "--duration", "12s", "--speed", "5", "--dashboard-listen", "off").CombinedOutput()
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
	if n := strings.Count(text, "  decisions "); n < 8 {
		t.Errorf("%d window lines, want one a second:\n%s", n, text)
	}
	if !strings.Contains(text, "most refused 203.0.113.7") {
		t.Errorf("no window names the scraper:\n%s", text)
	}
	scraperOK, scraperChallenged, scraperBlocked := num(`scraper +sent \d+: ok (\d+)`), num(`scraper +sent \d+: ok \d+, challenged (\d+)`), num(`scraper +sent \d+: .*blocked (\d+)`)
	// The limits are per minute, aligned to the minute: the scraper gets
	// 60 a minute, challenges up to twice that (its /api/search requests
	// count against the path rule's 30 too, so the split moves a little
	// with the order requests arrive in), then blocks; a run across the
	// top of a minute starts again.
	if scraperOK < 50 || scraperOK > 2*60 || scraperChallenged < 1 || scraperBlocked < 10*(scraperOK+scraperChallenged) {
		t.Errorf("scraper: ok %d (want about the global limit, 60, per minute), challenged %d, blocked %d (want most)", scraperOK, scraperChallenged, scraperBlocked)
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
	if num(`203\.0\.113\.7 +(\d+)`) < scraperBlocked {
		t.Errorf("the report's refusals of the scraper are fewer than it was blocked:\n%s", text)
	}
}
