package alerts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge/lists"
	"github.com/ratewarden/ratewarden/internal/visible"
)

// The tests of this file follow a user id the client chose from a
// window's partial through the alert engine to what the alerts and the
// feedback policies write. The edge believes only ids the lists hold as
// they are (identity.Believes; edge/identity's tests), but a decision log
// an older edge wrote may hold others.

// heavyHitterAlerts runs one minute window in which user made 700 blocked
// requests on anonymous:global (limit 120 a minute; the heavy-hitter
// threshold is 5× that) through the engine, and returns the firing
// heavy-hitter alerts.
func heavyHitterAlerts(t *testing.T, user string) []alerts.Alert {
	t.Helper()
	cfg := testConfig(t)
	e, err := alerts.NewEngine(alerts.Options{Config: cfg.Alerts, Window: time.Minute, Limits: alerts.RuleLimits(cfg)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := aggregator.NewPartial(t0, time.Minute, 100)
	for range 700 {
		d := decisions.Decision{Time: t0, Tier: "anonymous", Rule: config.RuleID("anonymous", config.GlobalRule),
			ClientIP: netip.MustParseAddr("203.0.113.9"), UserID: user, Outcome: decisions.Block}
		p.Update(&d)
	}
	as, err := e.Window(p)
	if err != nil {
		t.Fatal(err)
	}
	var out []alerts.Alert
	for _, a := range as {
		if a.Type == alerts.TypeHeavyHitter && a.State == alerts.Firing {
			out = append(out, a)
		}
	}
	if len(out) != 1 {
		t.Fatalf("heavy-hitter alerts %+v, want one", out)
	}
	return out
}

// TestWebhookEscapesHostileUserID: a user id holding Slack mrkdwn control
// sequences (<!channel>, <url|label>) is posted by the webhook as text,
// not as a mention of the whole channel and a link with a label of the
// attacker's choosing: Slack asks senders to escape &, < and > in text.
// One holding *, _, ~ or backticks is not set in bold, italics or
// strike-through, nor opens a code span that swallows what follows: in
// the mrkdwn block the id stands only inside code spans (the key's, the
// summary's, the top identities'), and the text is posted as plain text
// (postSlack checks "mrkdwn": false).
func TestWebhookEscapesHostileUserID(t *testing.T) {
	inSpan := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "`", "\u02cb")
	for _, user := range []string{ // printable: the edge believes them
		"<!channel> <https://evil.example/unblock|ratewarden: approve unblock>",
		"*URGENT* unblock me", "_x_", "~x~", "a`*b*`c", "` *URGENT* `", "x`",
	} {
		text, block := postSlack(t, heavyHitterAlerts(t, user)[0])
		for name, got := range map[string]string{"text": text, "mrkdwn block": block} {
			for _, bad := range []string{"<!channel>", "<https://evil.example/unblock|"} {
				if strings.Contains(got, bad) {
					t.Errorf("the %s holds %q unescaped, which Slack renders as markup:\n%s", name, bad, got)
				}
			}
		}
		if out := outsideCodeSpans(block); strings.Contains(out, "user:") {
			t.Errorf("user id %q: the block holds it outside a code span, where Slack reads it as mrkdwn:\n%s\n(outside the spans: %q)", user, block, out)
		}
		span := "`user:" + inSpan.Replace(user) + "`"
		if !strings.Contains(block, "\n"+span+" made 700 requests on ") || !strings.HasSuffix(block, "\ntop identities: "+span) {
			t.Errorf("user id %q: the block does not open its summary and end with %s:\n%s", user, span, block)
		}
	}
}

// outsideCodeSpans returns what a mrkdwn text holds outside its code
// spans, pairing backticks as Slack does: each with the next.
func outsideCodeSpans(s string) string {
	parts := strings.Split(s, "`")
	var out strings.Builder
	for i := 0; i < len(parts); i += 2 {
		out.WriteString(parts[i])
	}
	return out.String()
}

// denyHitters puts heavy hitters on the deny list.
var denyHitters = config.FeedbackPolicy{Name: "deny-hitters", Alerts: []string{alerts.TypeHeavyHitter},
	MinSeverity: alerts.Warning, Action: lists.Deny, TTL: time.Hour}

// feedback runs the deny policy on a through a file store, and returns the
// action and the deny list as the edge reads the file back.
func feedback(t *testing.T, a alerts.Alert) (alerts.Action, *lists.List) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "deny.txt")
	store := lists.NewFileStore(map[string]string{lists.Deny: path}, func() time.Time { return a.Time })
	p := alerts.NewPolicies(feedbackConfig(false, 100, denyHitters), store, nil, func(string) bool { return false }, 64)
	var applied []time.Time
	acts := p.Act(context.Background(), a, &applied)
	if len(acts) != 1 {
		t.Fatalf("actions %+v, want one", acts)
	}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return acts[0], nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := lists.ParseAt(f, path, lists.Deny, a.Time)
	if err != nil {
		t.Fatal(err)
	}
	return acts[0], l
}

// TestFeedbackListsTheOffenderNotAnother: a heavy hitter whose user id is
// another user's with white space around it (here a no-break space, which
// an older edge believed) is never put on the deny list as that other
// user: the list writers do not trim the id into another user's, and the
// action fails instead.
func TestFeedbackListsTheOffenderNotAnother(t *testing.T) {
	const old = "\u00a0victim"
	act, deny := feedback(t, heavyHitterAlerts(t, old)[0])
	ip := netip.MustParseAddr("198.51.100.20")
	if deny != nil && deny.ContainsAt(ip, "victim", act.Time) {
		t.Errorf("the deny list denies the user %q, who made no request; the action was %+v", "victim", act)
	}
	if act.Applied || act.Target != "user:"+old || act.Why != alerts.WhyWriteFailed {
		t.Errorf("action %+v, want one on user:%q, failed to write", act, old)
	}
}

// TestJSONLinesShowsFormatCharacters: the alert JSON lines (standard
// output, or the file an on-call tails) write the format characters and
// line separators a user id may hold, which the edge believes, as \u
// escapes, in the summary, the key and the identities of an alert and the
// target of an action: "user:ad\u200bmin made 700 requests" would read
// "user:admin" on a terminal. Each line decodes to the values written.
func TestJSONLinesShowsFormatCharacters(t *testing.T) {
	for _, user := range []string{"ad\u200bmin", "\u202enimda", "user\u2028admin", "bob\U000e0041"} {
		a := heavyHitterAlerts(t, user)[0]
		act := alerts.Action{Kind: "action", Time: a.Time, Policy: "p", Alert: a.Key, List: "deny", Target: "user:" + user}
		var b bytes.Buffer
		j := alerts.NewJSONLines(&b, nil)
		if err := j.Alert(context.Background(), a); err != nil {
			t.Fatal(err)
		}
		if err := j.Action(context.Background(), act); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if strings.ContainsFunc(strings.ReplaceAll(out, "\n", ""), visible.Hidden) {
			t.Errorf("user %q: the JSON lines hold a character that is not drawn:\n%q", user, out)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		var gotA alerts.Alert
		var gotAct alerts.Action
		if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &gotA) != nil || json.Unmarshal([]byte(lines[1]), &gotAct) != nil ||
			gotA.Summary != a.Summary || gotA.Key != a.Key || !slices.Equal(gotA.Identities, a.Identities) || gotAct != act {
			t.Errorf("user %q: the lines do not decode to what was written:\n%s", user, out)
		}
	}
}

// TestWebhookShowsUnprintedCharacters: a user id holding characters that
// are not drawn but act on the text around them (line breaks, which would
// forge alert lines; bidirectional controls, which reorder what follows;
// zero-width characters; NUL), bytes that are not UTF-8 (or U+FFFD, which
// JSON writes for them), or 10 kB, reaches the channel with a visible
// escape for each (as strconv.QuoteToASCII writes it, a backslash of the
// id's own doubled so that it is not taken for one) and cut to 128
// characters, in the text and in every code span of the block, each on
// its own line.
func TestWebhookShowsUnprintedCharacters(t *testing.T) {
	for _, tc := range []struct{ name, user, shown string }{
		{"LF forging a line", "x\n*Alert resolved*", `x\n*Alert resolved*`},
		{"CR", "x\r*Alert resolved*", `x\r*Alert resolved*`},
		{"U+2028, U+2029", "x\u2028*Alert resolved*\u2029", `x\u2028*Alert resolved*\u2029`},
		{"NEL, tab, VT", "x\u0085y\tz\x0b", `x\u0085y\tz\v`},
		{"bidi override and isolate", "admin\u202e\u2066txt.exe\u2069", `admin\u202e\u2066txt.exe\u2069`},
		{"zero width", "vic\u200dtim\u200b\ufeff", `vic\u200dtim\u200b\ufeff`},
		{"NUL, ESC", "x\x00y\x1b[31m", `x\x00y\x1b[31m`},
		{"not UTF-8, and U+FFFD", "x\xffy\xe2\x80\ufffd", `x\xffy\xe2\x80\ufffd`},
		{"backslash", `x\ny`, `x\\ny`},
		{"backticks around LF", "a`\n`*b*", "a`\\n`*b*"},
		{"10 kB", strings.Repeat("a", 10240), strings.Repeat("a", 123) + "… (cut from 10245 bytes)"},
		// Cut before an escape, not within it: "user:" and 20 escapes of 6.
		{"200 bidi overrides", strings.Repeat("\u202e", 200), strings.Repeat(`\u202e`, 20) + "… (cut from 605 bytes)"},
	} {
		text, block := postSlack(t, heavyHitterAlerts(t, tc.user)[0])
		for name, got := range map[string]string{"text": strings.ReplaceAll(text, "\n", ""), "mrkdwn block": strings.ReplaceAll(block, "\n", "")} {
			if i := strings.IndexFunc(got, unprinted); i >= 0 {
				r, _ := utf8.DecodeRuneInString(got[i:])
				t.Errorf("%s: the %s holds %U at byte %d:\n%s", tc.name, name, r, i, got)
			}
		}
		if n := strings.Count(text, "\n") + 1; n != 1 {
			t.Errorf("%s: the text is %d lines, want 1:\n%s", tc.name, n, text)
		}
		lines := strings.Split(block, "\n")
		if len(lines) != 4 {
			t.Errorf("%s: the block is %d lines, want 4 (key, summary, window, identities):\n%s", tc.name, len(lines), block)
		}
		code := "user:" + strings.ReplaceAll(tc.shown, "`", "\u02cb")
		if !strings.HasPrefix(text, "[WARNING] heavy_hitter firing: user:"+tc.shown+" made 700 requests on ") ||
			len(lines) != 4 || !strings.HasSuffix(lines[0], "/"+code+"` firing") ||
			!strings.HasPrefix(lines[1], "`"+code+"` made 700 requests on ") || lines[3] != "top identities: `"+code+"`" {
			t.Errorf("%s: want the id shown as user:%s in the text and `%s` in the key, the summary and the identities:\ntext: %s\nblock:\n%s",
				tc.name, tc.shown, code, text, block)
		}
	}
}

// unprinted reports whether r is a character the messages must not hold
// as it is: one that is not drawn but acts on the text around it, or
// U+FFFD, which JSON writes for a byte that is not UTF-8.
func unprinted(r rune) bool {
	return r == utf8.RuneError || unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}

// TestWebhookBlockFitsTenLongIDs: an alert naming ten user ids of the
// longest the edge believes (decisions.MaxUserIDLen bytes), half of them
// ampersands, which the message holds as "&amp;", is posted in a block
// Slack takes, its text at most 3000 characters: each identity is cut,
// in the key, the summary and the list.
func TestWebhookBlockFitsTenLongIDs(t *testing.T) {
	var ids []string
	for i := range 10 {
		ids = append(ids, "user:"+strings.Repeat("&"+string(rune('a'+i)), decisions.MaxUserIDLen/2))
	}
	a := hitter(ids[0], "anonymous", t0)
	a.Identities, a.Summary = ids, ids[0]+" made 700 requests"
	_, block := postSlack(t, a)
	cut := "… (cut from " + strconv.Itoa(len(ids[0])) + " bytes)"
	if n := utf8.RuneCountInString(block); n > 3000 || strings.Count(block, cut) != 12 {
		t.Errorf("the block is %d characters, want at most 3000, with 12 identities ending %q (the key's, the summary's and the ten listed):\n%s", n, cut, block)
	}
}

// FuzzWebhookUserID: whatever a user id holds, the block is its four
// lines, holds no character that is not drawn, and lists at most 128
// characters of the id (and the note of the cut).
func FuzzWebhookUserID(f *testing.F) {
	for _, s := range []string{"x\n*Alert resolved*", "a`\n`*b*", "\u202e\xff\ufffd\\", strings.Repeat("\u200d", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, user string) {
		a := hitter("user:"+user, "anonymous", t0)
		a.Summary = a.Identities[0] + " made 700 requests"
		_, block := postSlack(t, a)
		lines := strings.Split(block, "\n")
		longest := utf8.RuneCountInString("top identities: `… (cut from "+strconv.Itoa(len(a.Identities[0]))+" bytes)`") + 128
		if i := strings.IndexFunc(strings.Join(lines, ""), unprinted); i >= 0 || len(lines) != 4 || utf8.RuneCountInString(lines[3]) > longest {
			t.Errorf("user id %q: the block is %d lines (want 4), holds an unprinted character at %d, or lists more than %d characters:\n%s",
				user, len(lines), i, longest, block)
		}
	})
}
