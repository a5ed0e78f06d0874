package alerts_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge/lists"
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
