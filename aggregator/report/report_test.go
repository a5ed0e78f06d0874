package report

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	"github.com/ratewarden/ratewarden/internal/golden"
)

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

// fixedEvents are the golden reports' input: the decision generator's
// realistic day, its event times stretched 300-fold so that 6000 events
// span eleven one-minute windows, 10:00 to 10:11.
func fixedEvents() []decisions.Decision {
	ds := decisiontest.NewGenerator(11, t0).Batch(6000)
	for i := range ds {
		ds[i].Time = t0.Add(ds[i].Time.Sub(t0) * 300)
	}
	return ds
}

// storePartials rolls ds up with the aggregator (1-minute windows, top-K of
// 20 so that the lists overflow) into a PartialsDir under a new directory.
func storePartials(t *testing.T, ds []decisions.Decision) string {
	t.Helper()
	return storePartialsK(t, ds, 20)
}

// storePartialsK is storePartials with top-K lists of k clients.
func storePartialsK(t *testing.T, ds []decisions.Decision, k int) string {
	t.Helper()
	dir := t.TempDir()
	r := aggregator.NewRollup(aggregator.Options{Window: time.Minute, TopK: k})
	for i := range ds {
		r.Add(&ds[i], uint64(i))
	}
	sink := &aggregator.PartialsDir{Dir: dir}
	if err := r.Flush(true, func(o aggregator.Output) error { return sink.Write(context.Background(), "log", o) }); err != nil {
		t.Fatal(err)
	}
	return dir
}

// damage removes the partial of the window starting at gap and adds a
// corrupt partial file, as a lost and a broken output.
func damage(t *testing.T, dir string, gap time.Time) {
	t.Helper()
	day := filepath.Join(dir, "1m0s", gap.Format(time.DateOnly))
	files, _ := filepath.Glob(filepath.Join(day, "*"))
	prefix := filepath.Join(day, strconv.FormatInt(gap.UnixNano(), 10)+".")
	removed := 0
	for _, f := range files {
		if strings.HasPrefix(f, prefix) {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	if removed == 0 {
		t.Fatalf("no partial of %v to remove", gap)
	}
	corrupt := filepath.Join(day, strconv.FormatInt(gap.Add(2*time.Minute).UnixNano(), 10)+".log2.0-0.rwp")
	if err := os.WriteFile(corrupt, []byte("RWP\x01garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReportSkipsFlippedPartial: a partial file with one bit of its event
// count flipped (bytes that stay well formed) is listed unreadable, for
// its checksum, and its window missing; the other windows are read.
func TestReportSkipsFlippedPartial(t *testing.T) {
	dir := storePartials(t, fixedEvents())
	flipped := t0.Add(4 * time.Minute)
	files, _ := filepath.Glob(filepath.Join(dir, "1m0s", flipped.Format(time.DateOnly), strconv.FormatInt(flipped.UnixNano(), 10)+".*"))
	if len(files) != 1 {
		t.Fatalf("partials of %v: %q, want one", flipped, files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	p, err := aggregator.DecodePartial(b)
	if err != nil {
		t.Fatal(err)
	}
	// The event count follows the magic, the version, the start and the length.
	b[4+len(binary.AppendUvarint(nil, uint64(p.Start.UnixNano())))+len(binary.AppendUvarint(nil, uint64(p.Size)))] ^= 1
	if err := os.WriteFile(files[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	from, to := t0, t0.Add(11*time.Minute)
	w, err := ReadDir(t.Context(), dir, time.Minute, from, to, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := Build(w, nil, Options{From: from, To: to, Source: "partials dir", Top: 5, TopK: 20}).Coverage
	if len(c.Unreadable) != 1 || !strings.Contains(c.Unreadable[0].Error, "checksum mismatch") || c.Missing != 1 || c.Read != 10 {
		t.Fatalf("coverage %+v: want the flipped file unreadable for its checksum, its window missing, 10 read", c)
	}
}

func goldenReport(t *testing.T) *Report {
	t.Helper()
	dir := storePartials(t, fixedEvents())
	damage(t, dir, t0.Add(4*time.Minute))
	from, to := t0, t0.Add(11*time.Minute)
	w, err := ReadDir(t.Context(), dir, time.Minute, from, to, nil)
	if err != nil {
		t.Fatal(err)
	}
	al, err := ReadAlertsFile(filepath.Join("testdata", "alerts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return Build(w, al, Options{From: from, To: to, Source: "partials dir:testdata", Top: 5, TopK: 20, Points: 12})
}

// TestGoldenReports renders the report of a fixed log's partials, one of
// them lost and one corrupt, in every format, against the golden files;
// rendering twice gives the same bytes.
func TestGoldenReports(t *testing.T) {
	r := goldenReport(t)
	for _, f := range []Format{Markdown, HTML, JSON, CSV} {
		var a, b bytes.Buffer
		if err := r.Render(&a, f); err != nil {
			t.Fatal(err)
		}
		if err := goldenReport(t).Render(&b, f); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Errorf("%v: two builds of the same input render differently", f)
		}
		golden.Check(t, "report."+f.String(), a.Bytes())
	}
}

// TestReportCountsTheEvents checks the report's figures against the events
// themselves, not against a golden file: totals, outcomes, the windows that
// are gaps, the unreadable file and the alerts lines skipped.
func TestReportCountsTheEvents(t *testing.T) {
	ds := fixedEvents()
	r := goldenReport(t)
	gap := t0.Add(4 * time.Minute)
	var requests, refused, challenges uint64
	byIP := map[string]uint64{}
	refusedByTier := map[string]map[string]uint64{}                // tier, identity
	challenged, passed := map[string]uint64{}, map[string]uint64{} // by identity
	for _, d := range ds {
		if d.Kind != decisions.KindDecision || !d.Time.Before(t0.Add(11*time.Minute)) {
			continue
		}
		if !d.Time.Before(gap) && d.Time.Before(gap.Add(time.Minute)) {
			continue
		}
		requests++
		if aggregator.Refused(d.Outcome) {
			refused++
			if refusedByTier[d.Tier] == nil {
				refusedByTier[d.Tier] = map[string]uint64{}
			}
			refusedByTier[d.Tier][aggregator.ClientOf(&d, 0).String()]++
			if d.UserID == "" {
				byIP[aggregator.ClientOf(&d, 0).String()]++ // an IPv6 client by its /64
			}
		}
		if d.Outcome == decisions.Challenge {
			challenges++
			challenged[aggregator.ClientOf(&d, 0).String()]++
		}
		if d.Outcome == decisions.TokenPass {
			passed[aggregator.ClientOf(&d, 0).String()]++
		}
	}
	s := r.Summary
	if s.Requests != requests || s.Refused != refused || s.Challenges != challenges || s.Passed+s.Refused != s.Requests {
		t.Errorf("summary requests %d refused %d challenges %d passed %d; the events say %d, %d, %d",
			s.Requests, s.Refused, s.Challenges, s.Passed, requests, refused, challenges)
	}
	c := r.Coverage
	if c.Windows != 11 || c.Read != 10 || c.Missing != 1 || c.Complete || len(c.Gaps) != 1 || !c.Gaps[0].From.Equal(gap) || c.Gaps[0].Windows != 1 {
		t.Errorf("coverage %+v: want 11 windows, the one at %v missing", c, gap)
	}
	if len(c.Unreadable) != 1 || !strings.Contains(c.Unreadable[0].Source, ".log2.") {
		t.Errorf("unreadable %v: want the corrupt file", c.Unreadable)
	}
	if c.AlertSkipN != 2 || len(c.AlertSkips) != 2 || !strings.HasSuffix(c.AlertSkips[0].Source, "alerts.jsonl:3") {
		t.Errorf("alert lines skipped %d %v: want lines 3 and 6", c.AlertSkipN, c.AlertSkips)
	}
	// The heaviest refused address (or IPv6 /64) leads the IP table with
	// its exact refusals (its count is far above the lists' floors).
	var top string
	for ip, n := range byIP {
		if n > byIP[top] || n == byIP[top] && ip < top {
			top = ip
		}
	}
	if len(r.ByIP) == 0 || r.ByIP[0].Identity != top || r.ByIP[0].Refusals < byIP[top] {
		t.Errorf("top IP %+v: the events' top refused address is %s with %d", r.ByIP, top, byIP[top])
	}
	// Each tier's table lists its refusals (partial encoding version 3):
	// every client's within its bounds, a client listed by requests alone
	// too, the tier's heaviest refuser first.
	for _, tier := range r.Tiers {
		byClient := refusedByTier[tier.Name]
		var most uint64
		for _, n := range byClient {
			most = max(most, n)
		}
		if most == 0 {
			continue
		}
		if len(tier.Top) == 0 || byClient[tier.Top[0].Identity] != most {
			t.Errorf("tier %s: top clients %+v; the events' heaviest refuser has %d", tier.Name, tier.Top, most)
		}
		for _, o := range tier.Top {
			if n := byClient[o.Identity]; n < o.RefusalsMin || n > o.Refusals {
				t.Errorf("tier %s: %s: refusals %d..%d; the events say %d", tier.Name, o.Identity, o.RefusalsMin, o.Refusals, n)
			}
		}
	}
	// Every client's challenges and token passes lie within its bounds,
	// and its solve rate within the bounds the report gives.
	withRate := 0
	for _, os := range [][]Offender{r.ByIP, r.ByUser, r.NeverSolved} {
		for _, o := range os {
			ch, tp := challenged[o.Identity], passed[o.Identity]
			if ch < o.ChallengesMin || ch > o.Challenges || tp < o.TokenPassesMin || tp > o.TokenPasses {
				t.Errorf("%s: challenges %d..%d token passes %d..%d; the events say %d and %d",
					o.Identity, o.ChallengesMin, o.Challenges, o.TokenPassesMin, o.TokenPasses, ch, tp)
			}
			if o.SolveRateMin == nil {
				continue
			}
			withRate++
			if v := float64(tp) / float64(ch+tp); v < *o.SolveRateMin-1e-4 || v > *o.SolveRateMax+1e-4 {
				t.Errorf("%s: solve rate %v..%v; the events say %v", o.Identity, *o.SolveRateMin, *o.SolveRateMax, v)
			}
		}
	}
	if withRate == 0 {
		t.Error("no offender has a solve rate")
	}
	// The never-solved table leads with the events' most challenged client
	// without a token pass, and lists none that passed one.
	var loop string
	for id, n := range challenged {
		if passed[id] == 0 && (n > challenged[loop] || n == challenged[loop] && id < loop) {
			loop = id
		}
	}
	if len(r.NeverSolved) == 0 || r.NeverSolved[0].ChallengesMin != challenged[loop] {
		t.Errorf("never solved %+v: the events' most challenged client without a token pass is %s with %d", r.NeverSolved, loop, challenged[loop])
	}
	for _, o := range r.NeverSolved {
		if passed[o.Identity] > 0 {
			t.Errorf("never solved lists %s, which the events show passing %d tokens", o.Identity, passed[o.Identity])
		}
	}
	if len(r.Alerts) != 2 || len(r.Actions) != 2 {
		t.Errorf("alerts %d actions %d in range: want 2 and 2 (one of each is out of range)", len(r.Alerts), len(r.Actions))
	}
}

// TestCompleteRange: with every window present and readable the totals
// are not marked partial.
func TestCompleteRange(t *testing.T) {
	dir := storePartials(t, fixedEvents())
	w, err := ReadDir(t.Context(), dir, time.Minute, t0, t0.Add(10*time.Minute), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := Build(w, nil, Options{From: t0, To: t0.Add(10 * time.Minute)})
	if !r.Coverage.Complete || r.Coverage.Missing != 0 || len(r.Coverage.Gaps) != 0 {
		t.Errorf("coverage %+v: want complete", r.Coverage)
	}
	var md bytes.Buffer
	r.Render(&md, Markdown)
	if strings.Contains(md.String(), "partial:") || strings.Contains(md.String(), "Warning") {
		t.Errorf("a complete report warns:\n%s", md.String())
	}
}

// TestRollLogMatchesStoredPartials: the report of a log rolled up on the
// fly equals the report of the partials `aggregate` stores from it, but
// for the range's last window, which has no events: the partials cannot
// tell it from a window not aggregated, and mark the totals partial; the
// log read whole can, and says it had no events.
func TestRollLogMatchesStoredPartials(t *testing.T) {
	ds := fixedEvents()
	logDir := t.TempDir()
	l, err := seglog.Open(logDir, seglog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	for i := 0; i < len(ds); i += 500 {
		if err := w.WriteBatch(ds[i:min(i+500, len(ds))]); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	parts := t.TempDir()
	if _, err := aggregator.RunLog(context.Background(), aggregator.LogOptions{Dir: logDir, StateDir: t.TempDir(),
		Rollup: aggregator.Options{TopK: 20}, Sinks: []aggregator.Sink{&aggregator.PartialsDir{Dir: parts}}}); err != nil {
		t.Fatal(err)
	}
	from, to := t0, t0.Add(12*time.Minute)
	stored, err := ReadDir(t.Context(), parts, time.Minute, from, to, nil)
	if err != nil {
		t.Fatal(err)
	}
	var calls int
	rolled, err := RollLog(context.Background(), logDir, aggregator.Options{TopK: 20}, from, to, func(LogProgress) { calls++ })
	if err != nil {
		t.Fatal(err)
	}
	o := Options{From: from, To: to, TopK: 20}
	r := Build(rolled, nil, o)
	var md bytes.Buffer
	r.Render(&md, Markdown)
	if c := r.Coverage; !c.Complete || c.Empty != 1 || c.Missing != 0 || len(c.Gaps) != 0 || c.Read != 11 || r.Trend[len(r.Trend)-1].Missing != 0 ||
		strings.Contains(md.String(), "partial:") || !strings.Contains(md.String(), `11 of 12 windows have a partial \(1 had no events\); 0 gaps. The totals are complete.`) {
		t.Errorf("coverage of the log %+v, last trend point %+v:\n%s", c, r.Trend[len(r.Trend)-1], md.String())
	}
	if c := Build(stored, nil, o).Coverage; c.Complete || c.Missing != 1 || c.Empty != 0 {
		t.Errorf("coverage of the partials %+v", c)
	}
	stored.Rolled = true // the rest alike
	var a, b bytes.Buffer
	Build(stored, nil, o).Render(&a, JSON)
	r.Render(&b, JSON)
	if a.String() != b.String() || calls == 0 {
		t.Errorf("on the fly (%d progress calls):\n%s\nstored:\n%s", calls, b.String(), a.String())
	}
}

// TestHTMLIsSelfContained: the HTML report loads nothing from elsewhere
// and runs no script.
func TestHTMLIsSelfContained(t *testing.T) {
	var b bytes.Buffer
	if err := goldenReport(t).Render(&b, HTML); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, re := range []string{`(?i)(src|href|xlink:href|action)\s*=\s*["']?\s*(https?:)?//`, `(?i)url\(`, `(?i)@import`, `(?i)<script`, `(?i)<link`, `(?i)<iframe`, `(?i)https?://`} {
		if m := regexp.MustCompile(re).FindString(html); m != "" {
			t.Errorf("html has %q (%s)", m, re)
		}
	}
	if n := strings.Count(html, "<svg"); n != 1+len(goldenReport(t).Tiers) {
		t.Errorf("html has %d charts, want one overall and one per tier", n)
	}
}

// TestHostileIdentities: identities and alert texts are the clients' own
// bytes; they must not become markup, spreadsheet formulas or broken rows.
func TestHostileIdentities(t *testing.T) {
	evil := []string{"=HYPERLINK(\"x\")", "<script>alert(1)</script>", "a|b\nc", "+1+cmd", "@SUM(A1)", "[x](javascript:y)"}
	p := aggregator.NewPartial(t0, time.Minute, 10)
	for i, id := range evil {
		for range 3 + i {
			p.Update(&decisions.Decision{Time: t0, UserID: id, Tier: "free", Rule: id, Outcome: decisions.Block})
		}
	}
	w := &Windows{Size: time.Minute, Parts: map[time.Time]*aggregator.Partial{t0: p}}
	r := Build(w, nil, Options{From: t0, To: t0.Add(time.Minute)})
	out := map[Format]string{}
	for _, f := range []Format{Markdown, HTML, CSV} {
		var b bytes.Buffer
		if err := r.Render(&b, f); err != nil {
			t.Fatal(err)
		}
		out[f] = b.String()
	}
	// In a code span (mdCode) they are shown as they are, not read as
	// markup: what is outside one must hold none.
	for _, bad := range []string{`<script>`, `\]\(javascript`, `[^\\]\|b`} {
		if regexp.MustCompile(bad).MatchString(outsideCode(out[Markdown])) {
			t.Errorf("markdown holds %q unescaped", bad)
		}
	}
	if strings.Contains(out[HTML], "<script>") {
		t.Error("html holds <script> unescaped")
	}
	for _, line := range strings.Split(out[Markdown], "\n") {
		if strings.HasPrefix(line, "c|") || strings.HasPrefix(line, "c ") {
			t.Errorf("a newline in an identity broke a markdown row: %q", line)
		}
	}
	for _, formula := range []string{",=HYPERLINK", ",+1+cmd", ",@SUM", ",\"=HYPERLINK"} {
		if strings.Contains(out[CSV], formula) {
			t.Errorf("csv has a cell starting a formula: %q", formula)
		}
	}
	if !strings.Contains(out[CSV], "'=HYPERLINK") && !strings.Contains(out[CSV], "user:=HYPERLINK") {
		t.Errorf("csv lost the identity:\n%s", out[CSV])
	}
}

// outsideCode returns md with each table cell that is a code span
// (codeSpan) left empty.
func outsideCode(md string) string {
	var b strings.Builder
	for line := range strings.Lines(md) {
		cells := tableCells(strings.TrimSpace(line))
		if cells == nil {
			b.WriteString(line)
			continue
		}
		for _, c := range cells {
			if _, ok := codeSpan(c); !ok {
				b.WriteString("| " + c + " ")
			}
		}
		b.WriteString("|\n")
	}
	return b.String()
}

// TestCSVSafe: a cell a spreadsheet would take for a formula gets a
// leading apostrophe; a number, and the "-" the reports write for no
// value (a solve rate, a time), which no spreadsheet takes for one, are
// written as they are.
func TestCSVSafe(t *testing.T) {
	for in, want := range map[string]string{
		"":                 "",
		"-":                "-",
		"12":               "12",
		"-3":               "-3",
		"0.0 %":            "0.0 %",
		"user:mallory":     "user:mallory",
		"=1+1":             "'=1+1",
		"+cmd|calc":        "'+cmd|calc",
		"-2+3":             "'-2+3",
		"--":               "'--",
		"- 1":              "'- 1",
		"@SUM(A1)":         "'@SUM(A1)",
		"\t=1":             "'\t=1",
		"=HYPERLINK(\"\")": "'=HYPERLINK(\"\")",
	} {
		if got := csvSafe(in); got != want {
			t.Errorf("csvSafe(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestReadDirCancelled: ReadDir stops with ctx's error once ctx is done.
func TestReadDirCancelled(t *testing.T) {
	dir := storePartials(t, fixedEvents())
	from, to := t0.Add(-time.Hour), t0.Add(time.Hour)
	if w, err := ReadDir(t.Context(), dir, time.Minute, from, to, nil); err != nil || len(w.Parts) == 0 {
		t.Fatalf("ReadDir: %v, %v", w, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if w, err := ReadDir(ctx, dir, time.Minute, from, to, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadDir with a cancelled context: %v, %v; want context.Canceled", w, err)
	}
}

// TestRangeErrors: --from not before --to is refused with both times.
func TestRangeErrors(t *testing.T) {
	dir := storePartials(t, fixedEvents()[:10])
	_, err := ReadDir(t.Context(), dir, time.Minute, t0.Add(time.Hour), t0, nil)
	if err == nil || !strings.Contains(err.Error(), "not before") {
		t.Errorf("ReadDir with from after to: %v", err)
	}
	_, err = RollLog(context.Background(), dir, aggregator.Options{}, t0, t0, nil)
	if err == nil || !strings.Contains(err.Error(), "not before") {
		t.Errorf("RollLog with from equal to to: %v", err)
	}
}

// TestReadAlerts: alerts and actions are told apart; malformed lines are
// counted and named by line, and the rest are read.
func TestReadAlerts(t *testing.T) {
	in := `{"kind":"alert","time":"2026-03-02T10:01:00Z","type":"heavy_hitter","severity":"warning","state":"firing","key":"k","summary":"s","window_start":"2026-03-02T10:00:00Z","window_end":"2026-03-02T10:01:00Z","evidence":{"observed":1,"baseline":0}}
not json

{"kind":"action","time":"2026-03-02T10:01:00Z","policy":"p","alert":"k","list":"challenge","target":"203.0.113.9","applied":true,"future_field":1}
{"kind":"other"}
{"kind":"action","time":"2026-03-02T10:01:00Z"}
`
	a, err := ReadAlerts(strings.NewReader(in), "f")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Alerts) != 1 || len(a.Actions) != 1 || a.Skipped != 3 || a.Lines != 6 {
		t.Fatalf("alerts %d actions %d skipped %d lines %d", len(a.Alerts), len(a.Actions), a.Skipped, a.Lines)
	}
	want := []string{"f:2", "f:5", "f:6"}
	for i, p := range a.Problems {
		if p.Source != want[i] {
			t.Errorf("problem %d at %s, want %s", i, p.Source, want[i])
		}
	}
}

// TestAlign widens a range to whole windows.
func TestAlign(t *testing.T) {
	f, to := Align(t0.Add(90*time.Second), t0.Add(150*time.Second), time.Minute)
	if !f.Equal(t0.Add(time.Minute)) || !to.Equal(t0.Add(3*time.Minute)) {
		t.Errorf("Align: %v %v", f, to)
	}
}

func TestParseFormat(t *testing.T) {
	for _, s := range []string{"md", "html", "json", "csv"} {
		if f, err := ParseFormat(s); err != nil || f.String() != s {
			t.Errorf("ParseFormat(%q) = %v, %v", s, f, err)
		}
	}
	if _, err := ParseFormat("pdf"); err == nil || !strings.Contains(err.Error(), "md, html, json or csv") {
		t.Errorf("ParseFormat(pdf): %v", err)
	}
}

// FuzzReadAlerts: any bytes read as an alerts file give counts that add up
// and never a panic.
func FuzzReadAlerts(f *testing.F) {
	b, _ := os.ReadFile(filepath.Join("testdata", "alerts.jsonl"))
	f.Add(b)
	f.Add([]byte("{\"kind\":\"alert\"}\n\n{\"kind\":\"action\",\"time\":1}\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := ReadAlerts(bytes.NewReader(in), "f")
		if err != nil {
			t.Fatal(err) // only a failing reader errs
		}
		if len(a.Alerts)+len(a.Actions)+a.Skipped > a.Lines || len(a.Problems) > maxProblems || len(a.Problems) > a.Skipped {
			t.Fatalf("lines %d alerts %d actions %d skipped %d problems %d", a.Lines, len(a.Alerts), len(a.Actions), a.Skipped, len(a.Problems))
		}
	})
}

// TestReadAlertsLongLine: a line past the limit is skipped, and the lines
// after it are read.
func TestReadAlertsLongLine(t *testing.T) {
	in := `{"kind":"alert","time":"2026-03-02T10:01:00Z","type":"x","summary":"` + strings.Repeat("a", maxAlertLine) + `"}` + "\n" +
		`{"kind":"action","time":"2026-03-02T10:01:00Z","list":"challenge","target":"203.0.113.9","applied":true}`
	a, err := ReadAlerts(strings.NewReader(in), "f")
	if err != nil || a.Lines != 2 || a.Skipped != 1 || len(a.Actions) != 1 || !strings.Contains(a.Problems[0].Error, "longer than") {
		t.Fatalf("%v: lines %d skipped %d actions %d problems %v", err, a.Lines, a.Skipped, len(a.Actions), a.Problems)
	}
}

// TestRangeTopK checks the range's bounds against the exact counts: every
// client's true total lies between its bounds, the bounds are exact when no
// window's list overflowed, and the heaviest clients are found.
func TestRangeTopK(t *testing.T) {
	f := func(k, held int, seed uint64) {
		ds := decisiontest.NewGenerator(seed, t0).Batch(20_000)
		exact := map[aggregator.Client]uint64{}
		acc := newRangeTopK(k)
		acc.maxHeld = held
		for w := 0; w < len(ds); w += 1000 {
			tk := aggregator.NewTopK(k)
			for _, d := range ds[w : w+1000] {
				if d.Kind == decisions.KindDecision {
					c := aggregator.ClientOf(&d, 0)
					tk.Add(c, 1)
					exact[c]++
				}
			}
			acc.add(tk)
		}
		top := acc.top(k)
		for _, h := range top {
			if n := exact[h.Client]; n > h.Count || n < h.Count-h.Err {
				t.Errorf("k %d held %d: %v counted %d, bounds [%d, %d]", k, held, h.Client, n, h.Count-h.Err, h.Count)
			}
			if k >= 100_000 && h.Err != 0 {
				t.Errorf("k %d: %v has error %d with no list overflowing", k, h.Client, h.Err)
			}
		}
		var heaviest aggregator.Client
		for c, n := range exact {
			if n > exact[heaviest] {
				heaviest = c
			}
		}
		if len(top) == 0 || !slices.ContainsFunc(top[:min(3, len(top))], func(h aggregator.Hitter) bool { return h.Client == heaviest }) {
			t.Errorf("k %d held %d: the heaviest client %v (%d) is not among the first three of %v", k, held, heaviest, exact[heaviest], top[:min(3, len(top))])
		}
	}
	f(100_000, 1<<20, 1) // no overflow: exact
	f(100, 1600, 2)      // lists overflow
	f(50, 120, 3)        // and the held clients are pruned
}

// TestEmptyRange: a range with no partial renders, lists empty and the
// totals marked partial, in every format; each empty table of a section
// of several says which it is.
func TestEmptyRange(t *testing.T) {
	w := &Windows{Size: time.Minute, Parts: map[time.Time]*aggregator.Partial{}}
	r := Build(w, nil, Options{From: t0, To: t0.Add(time.Hour)})
	if r.Coverage.Complete || r.Coverage.Missing != 60 || len(r.Coverage.Gaps) != 1 || r.Summary.Requests != 0 {
		t.Errorf("coverage %+v", r.Coverage)
	}
	empty := map[Format][]string{
		Markdown: {"**Unreadable inputs:** none.", "**Skipped alert lines:** none.", "**Policy actions:** none.", "**Feedback events:** none."},
		HTML:     {"<p><b>Unreadable inputs:</b> none.</p>", "<p><b>Skipped alert lines:</b> none.</p>", "<p><b>Policy actions:</b> none.</p>"},
	}
	for _, f := range []Format{Markdown, HTML, JSON, CSV} {
		var b bytes.Buffer
		if err := r.Render(&b, f); err != nil {
			t.Fatal(err)
		}
		if f == JSON && strings.Contains(strings.ReplaceAll(b.String(), `"solve_rate": null`, ""), "null") {
			t.Errorf("json has null lists:\n%s", b.String())
		}
		for _, want := range empty[f] {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s lacks %q:\n%s", f, want, b.String())
			}
		}
	}
}

// TestRolledEmptyRange: a range of the log itself with no event is
// complete, every window empty; only an input it could not read marks its
// totals partial.
func TestRolledEmptyRange(t *testing.T) {
	w := &Windows{Size: time.Minute, Parts: map[time.Time]*aggregator.Partial{}, Rolled: true}
	o := Options{From: t0, To: t0.Add(time.Hour)}
	if c := Build(w, nil, o).Coverage; !c.Complete || c.Empty != 60 || c.Missing != 0 || len(c.Gaps) != 0 {
		t.Errorf("coverage %+v", c)
	}
	w.Problems = []Problem{{Source: "log", Error: "checksum mismatch"}}
	r := Build(w, nil, o)
	var md bytes.Buffer
	r.Render(&md, Markdown)
	if c := r.Coverage; c.Complete || c.Missing != 0 || !strings.Contains(md.String(), "totals are partial: 1 inputs could not be read") ||
		!strings.Contains(md.String(), "Some input could not be read") {
		t.Errorf("coverage %+v:\n%s", c, md.String())
	}
}

// TestReadsTheAlertsSink: what the alerts package's JSON lines sink writes,
// the report reads, every record and nothing skipped.
func TestReadsTheAlertsSink(t *testing.T) {
	var b bytes.Buffer
	sink := alerts.NewJSONLines(&b, nil)
	ctx := context.Background()
	at := t0.Add(3 * time.Minute)
	if err := sink.Alert(ctx, alerts.Alert{Kind: "alert", Time: at, Type: "heavy_hitter", Severity: "critical", State: "firing",
		Key: "heavy_hitter/anonymous/203.0.113.7", Summary: "s", WindowStart: at.Add(-time.Minute), WindowEnd: at,
		Identities: []string{"203.0.113.7"}, Evidence: alerts.Evidence{Observed: 900, Baseline: 60}}); err != nil {
		t.Fatal(err)
	}
	if err := sink.Action(ctx, alerts.Action{Kind: "action", Time: at, Policy: "p", Alert: "heavy_hitter/anonymous/203.0.113.7",
		List: "challenge", Target: "203.0.113.0/24", TTL: "1h0m0s", Applied: true}); err != nil {
		t.Fatal(err)
	}
	a, err := ReadAlerts(&b, "sink")
	if err != nil || a.Skipped != 0 || len(a.Alerts) != 1 || len(a.Actions) != 1 {
		t.Fatalf("%v: skipped %d %v, alerts %d, actions %d", err, a.Skipped, a.Problems, len(a.Alerts), len(a.Actions))
	}
	if got := actionsOn("203.0.113.7", a.Actions); !slices.Equal(got, []string{"challenge:applied"}) {
		t.Errorf("actions on 203.0.113.7 through its /24: %v", got)
	}
}

// TestReportChallengeBoundsOverflow: with top-K lists of 3 clients, which
// overflow in every window, each listed client's challenges, token passes
// and solve rate still lie within the bounds the report gives, and some
// bounds are apart (the lists did overflow).
func TestReportChallengeBoundsOverflow(t *testing.T) {
	ds := fixedEvents()
	dir := storePartialsK(t, ds, 3)
	from, to := t0, t0.Add(11*time.Minute)
	w, err := ReadDir(t.Context(), dir, time.Minute, from, to, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := Build(w, nil, Options{From: from, To: to, Top: 50, TopK: 3})
	challenged, passed := map[string]uint64{}, map[string]uint64{}
	for _, d := range ds {
		switch {
		case d.Kind != decisions.KindDecision || !d.Time.Before(to):
		case d.Outcome == decisions.Challenge:
			challenged[aggregator.ClientOf(&d, 0).String()]++
		case d.Outcome == decisions.TokenPass:
			passed[aggregator.ClientOf(&d, 0).String()]++
		}
	}
	tables := [][]Offender{r.ByIP, r.ByUser, r.NeverSolved}
	for _, tr := range r.Tiers {
		tables = append(tables, tr.Top)
	}
	apart, unknown, rated := 0, 0, 0
	for _, os := range tables {
		for _, o := range os {
			ch, tp := challenged[o.Identity], passed[o.Identity]
			if ch < o.ChallengesMin || ch > o.Challenges || tp < o.TokenPassesMin || tp > o.TokenPasses {
				t.Errorf("%s: challenges %d..%d token passes %d..%d; the events say %d and %d",
					o.Identity, o.ChallengesMin, o.Challenges, o.TokenPassesMin, o.TokenPasses, ch, tp)
			}
			if o.ChallengesMin != o.Challenges || o.TokenPassesMin != o.TokenPasses {
				apart++
			}
			if o.SolveRateMin == nil {
				unknown++
				continue
			}
			rated++
			if ch+tp == 0 {
				continue
			}
			if v := float64(tp) / float64(ch+tp); v < *o.SolveRateMin-1e-4 || v > *o.SolveRateMax+1e-4 {
				t.Errorf("%s: solve rate %v..%v; the events say %v", o.Identity, *o.SolveRateMin, *o.SolveRateMax, v)
			}
		}
	}
	if apart == 0 || unknown == 0 || rated == 0 || len(r.NeverSolved) == 0 {
		t.Errorf("%d offenders with bounds apart, %d without a solve rate, %d with one, %d never solved: want some of each",
			apart, unknown, rated, len(r.NeverSolved))
	}
}

// TestReportWindowsWithoutClientChallenges: a window whose partial counted
// challenges but lists no challenged client (as version 1 partials) is
// counted and warned of, and its challenges are left out of the clients'.
func TestReportWindowsWithoutClientChallenges(t *testing.T) {
	from, to := t0, t0.Add(11*time.Minute)
	w, err := ReadDir(t.Context(), storePartials(t, fixedEvents()), time.Minute, from, to, nil)
	if err != nil {
		t.Fatal(err)
	}
	full := Build(w, nil, Options{From: from, To: to, Top: 5, TopK: 20})
	if full.Coverage.NoClientChallenges != 0 {
		t.Fatalf("%d windows without client challenges in partials of the current encoding", full.Coverage.NoClientChallenges)
	}
	old, removed := 0, map[string]uint64{}
	for _, st := range sortedStarts(w.Parts) {
		p := w.Parts[st]
		if oc := p.Counts.ByOutcome(); oc[decisions.Challenge] > 0 && old < 2 {
			for _, h := range p.Offenders.Challenged.Top(p.Offenders.Challenged.Len()) {
				removed[h.Client.String()] += h.Count - h.Err
			}
			// What DecodePartial makes of a version 1 partial: the lists
			// version 2 added, empty.
			p.Offenders.Challenged, p.Offenders.TokenPassed = aggregator.NewTopK(20), aggregator.NewTopK(20)
			old++
		}
	}
	r := Build(w, nil, Options{From: from, To: to, Top: 5, TopK: 20})
	var md bytes.Buffer
	if err := r.Render(&md, Markdown); err != nil {
		t.Fatal(err)
	}
	if old != 2 || r.Coverage.NoClientChallenges != old || !strings.Contains(md.String(), "2 windows' partials list no client by challenges") {
		t.Errorf("%d windows emptied; coverage counts %d; warning in:\n%s", old, r.Coverage.NoClientChallenges, md.String())
	}
	// The lists did not overflow: each client's challenges are exact, and
	// lose what the emptied windows listed.
	fullBy := map[string]uint64{}
	for _, os := range [][]Offender{full.ByIP, full.ByUser} {
		for _, o := range os {
			fullBy[o.Identity] = o.ChallengesMin
		}
	}
	lost := 0
	for _, os := range [][]Offender{r.ByIP, r.ByUser} {
		for _, o := range os {
			if n, ok := fullBy[o.Identity]; ok && o.ChallengesMin != n-removed[o.Identity] {
				t.Errorf("%s: %d challenges, %d with every window listed, %d in the emptied ones", o.Identity, o.ChallengesMin, n, removed[o.Identity])
			}
			if removed[o.Identity] > 0 {
				lost++
			}
		}
	}
	if lost == 0 {
		t.Error("no offender was challenged in the emptied windows: the check checks nothing")
	}
}

// offenderWindows are two windows of the same traffic, rolled up with
// top-K lists of k clients: 10.0.0.1 makes 100 allowed requests and no
// refusal, 10.0.0.2 and 10.0.0.3 80 and 60 allowed requests, and
// 10.0.1.1 to 10.0.1.4 10 to 13 blocked ones each, first. It returns the
// windows and each client's requests and refusals over both.
func offenderWindows(k int) (w *Windows, requests, refusals map[string]uint64) {
	w = &Windows{Size: time.Minute, Parts: map[time.Time]*aggregator.Partial{}}
	requests, refusals = map[string]uint64{}, map[string]uint64{}
	for m := range 2 {
		start := t0.Add(time.Duration(m) * time.Minute)
		p := aggregator.NewPartial(start, time.Minute, k)
		add := func(ip string, n int, o decisions.Outcome) {
			for range n {
				d := decisions.Decision{Kind: decisions.KindDecision, Time: start, ClientIP: netip.MustParseAddr(ip),
					Tier: "anonymous", Rule: "anonymous:global", Outcome: o}
				p.Update(&d)
				requests[ip]++
				if aggregator.Refused(o) {
					refusals[ip]++
				}
			}
		}
		for i := range 4 {
			add("10.0.1."+strconv.Itoa(i+1), 10+i, decisions.Block)
		}
		add("10.0.0.1", 100, decisions.Allow)
		add("10.0.0.2", 80, decisions.Allow)
		add("10.0.0.3", 60, decisions.Allow)
		w.Parts[start] = p
	}
	return w, requests, refusals
}

// TestOffenderBoundsOffTheOtherList: a client among the top requesters but
// not among the top refusers shows refusals from 0 to the sum of the
// refusal lists' floors where those lists were full, and exactly 0 where
// they never were (they then count every refuser); a top refuser outside
// the requests lists shows requests from its refusals to the sum of their
// floors. Every bound holds the client's true count, in the IP table and
// the tier's, and the CSV and JSON renderings carry them.
func TestOffenderBoundsOffTheOtherList(t *testing.T) {
	find := func(os []Offender, id string) *Offender {
		for i := range os {
			if os[i].Identity == id {
				return &os[i]
			}
		}
		return nil
	}
	f := func(k int) {
		t.Helper()
		w, requests, refusals := offenderWindows(k)
		var reqFloors, refFloors, tierReqFloors, tierRefFloors uint64
		for _, p := range w.Parts {
			reqFloors += p.Offenders.Requests.Floor()
			refFloors += p.Offenders.Refusals.Floor()
			tierReqFloors += p.Offenders.RequestsByTier["anonymous"].Floor()
			tierRefFloors += p.Offenders.RefusalsByTier["anonymous"].Floor()
		}
		r := Build(w, nil, Options{From: t0, To: t0.Add(2 * time.Minute), Top: 10, TopK: k})
		if len(r.Tiers) != 1 {
			t.Fatalf("k %d: %d tiers", k, len(r.Tiers))
		}
		tables := []struct {
			name               string
			os                 []Offender
			reqFloor, refFloor uint64
		}{{"by IP", r.ByIP, reqFloors, refFloors}, {"tier", r.Tiers[0].Top, tierReqFloors, tierRefFloors}}
		for _, tb := range tables {
			for _, o := range tb.os {
				if n := requests[o.Identity]; n < o.RequestsMin || n > o.Requests {
					t.Errorf("k %d, %s: %s: requests %d..%d; the events say %d", k, tb.name, o.Identity, o.RequestsMin, o.Requests, n)
				}
				if n := refusals[o.Identity]; n < o.RefusalsMin || n > o.Refusals {
					t.Errorf("k %d, %s: %s: refusals %d..%d; the events say %d", k, tb.name, o.Identity, o.RefusalsMin, o.Refusals, n)
				}
			}
			// The heaviest requester, never refused, is in no refusals list.
			heavy := find(tb.os, "10.0.0.1")
			if heavy == nil || heavy.RefusalsMin != 0 || heavy.Refusals != tb.refFloor {
				t.Errorf("k %d, %s: 10.0.0.1 %+v; want refusals 0..%d", k, tb.name, heavy, tb.refFloor)
			}
			// A top refuser outside the requests lists.
			listed := 0
			for _, o := range tb.os {
				if o.RefusalsMin == 0 || refusals[o.Identity] == 0 {
					continue
				}
				if o.RequestsMin == o.Requests {
					listed++ // exact: in the requests lists, or no list overflowed
					continue
				}
				if o.RequestsMin != o.RefusalsMin || o.Requests != tb.reqFloor {
					t.Errorf("k %d, %s: refuser %s: requests %d..%d, refusals %d..%d; want requests %d..%d",
						k, tb.name, o.Identity, o.RequestsMin, o.Requests, o.RefusalsMin, o.Refusals, o.RefusalsMin, tb.reqFloor)
				}
			}
			if tb.reqFloor == 0 && listed == 0 {
				t.Errorf("k %d, %s: no refuser listed exactly", k, tb.name)
			}
		}
		// The renderings carry the bounds of the heaviest requester.
		heavy := find(r.ByIP, "10.0.0.1")
		if heavy == nil {
			return
		}
		var csv, js bytes.Buffer
		if err := r.Render(&csv, CSV); err != nil {
			t.Fatal(err)
		}
		if err := r.Render(&js, JSON); err != nil {
			t.Fatal(err)
		}
		row := "offenders_ip,row,10.0.0.1," + u(heavy.Requests) + "," + u(heavy.RequestsMin) + "," + u(refFloors) + ",0,"
		if !strings.Contains(csv.String(), row) {
			t.Errorf("k %d: the CSV has no row %q:\n%s", k, row, csv.String())
		}
		var doc struct {
			ByIP []struct {
				Identity    string
				Refusals    uint64
				RefusalsMin *uint64 `json:"refusals_min"`
			} `json:"offenders_by_ip"`
		}
		if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		got := false
		for _, o := range doc.ByIP {
			if o.Identity == "10.0.0.1" {
				got = o.Refusals == refFloors && o.RefusalsMin != nil && *o.RefusalsMin == 0
			}
		}
		if !got {
			t.Errorf("k %d: the JSON's 10.0.0.1 has not refusals 0..%d:\n%s", k, refFloors, js.String())
		}
	}
	// Three clients a list: the refusals lists (four refusers) overflow.
	w, _, _ := offenderWindows(3)
	for _, p := range w.Parts {
		if p.Offenders.Refusals.Floor() == 0 || p.Offenders.Requests.Floor() == 0 {
			t.Fatalf("k 3: floors %d and %d: the test wants full lists", p.Offenders.Refusals.Floor(), p.Offenders.Requests.Floor())
		}
	}
	f(3)
	// Ten a list: none is ever full, so the floors are 0, every bound exact.
	f(10)
}

// TestReportUnknownOutcome: decisions of an outcome this reader does not
// know (a newer edge's) are requests of outcome "unknown", in the summary,
// their tier and their rule, and neither passed nor refused; before, they
// were in no total.
func TestReportUnknownOutcome(t *testing.T) {
	p := aggregator.NewPartial(t0, time.Minute, 10)
	for i, o := range []decisions.Outcome{decisions.Allow, 99, 99, decisions.Block} {
		d := decisions.Decision{Time: t0, Tier: "free", Rule: "free:global", Outcome: o,
			ClientIP: netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)})}
		p.Update(&d)
	}
	r := Build(&Windows{Size: time.Minute, Parts: map[time.Time]*aggregator.Partial{t0: p}}, nil, Options{From: t0, To: t0.Add(time.Minute)})
	s := r.Summary
	if s.Requests != 4 || s.Passed != 1 || s.Refused != 1 || !slices.Contains(s.Outcomes, OutcomeCount{Outcome: "unknown", Requests: 2}) {
		t.Errorf("summary: requests %d, passed %d, refused %d, outcomes %v; want 4, 1, 1, 2 unknown", s.Requests, s.Passed, s.Refused, s.Outcomes)
	}
	if len(r.Tiers) != 1 || r.Tiers[0].Requests != 4 || len(r.ByPath) != 1 || r.ByPath[0].Requests != 4 {
		t.Errorf("tiers %+v, rules %+v: want 4 requests each", r.Tiers, r.ByPath)
	}
}

// TestRollLogCorruptionOutsideRange: a corrupt region of the log between
// records wholly before the report's range held none of its events: the
// report does not list it as unreadable nor call its totals partial; one
// in the range it does.
func TestRollLogCorruptionOutsideRange(t *testing.T) {
	dir := t.TempDir()
	l, err := seglog.Open(dir, seglog.Options{SegmentBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	for i := range 6 { // a record a minute, a segment each
		if err := w.WriteBatch(decisiontest.NewGenerator(uint64(i), t0.Add(time.Duration(i)*time.Minute)).Batch(40)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	b, err := os.ReadFile(segs[1]) // the minute t0+1m
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 2; i < len(b)/2+16; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(segs[1], b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		from, to   time.Duration
		unreadable int
	}{{3 * time.Minute, 5 * time.Minute, 0}, {time.Minute, 2 * time.Minute, 1}} {
		from, to := t0.Add(c.from), t0.Add(c.to)
		rolled, err := RollLog(context.Background(), dir, aggregator.Options{TopK: 5}, from, to, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cov := Build(rolled, nil, Options{From: from, To: to, TopK: 5}).Coverage; len(cov.Unreadable) != c.unreadable || cov.Complete != (c.unreadable == 0) {
			t.Errorf("%v to %v: unreadable %v, complete %v; want %d unreadable", c.from, c.to, cov.Unreadable, cov.Complete, c.unreadable)
		}
	}
}
