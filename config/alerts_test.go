package config

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAlertErrors: every problem of the alerts and feedback sections names
// the file, the line, the key, the value and what is allowed.
func TestAlertErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, key, want string
	}{
		{"paying tier unknown", "alerts:\n  paying_tiers: [gold] # <-\n" + anonymous, "alerts.paying_tiers[0]", `"gold" names no tier; use one of anonymous`},
		{"z-score too small", "alerts:\n  z_score: 0.5 # <-\n" + anonymous, "alerts.z_score", `"0.5" is not allowed; use 1 to 1000`},
		{"min history over history", "alerts:\n  history: 10\n  min_history: 20 # <-\n" + anonymous, "alerts.min_history", "1 to 10"},
		{"webhook not http", "alerts:\n  sinks:\n    webhook:\n      url: ftp://x # <-\n" + anonymous, "alerts.sinks.webhook.url", "an http:// or https:// URL"},
		{"solve rate over 1", "alerts:\n  solve_rate: {min_rate: 2} # <-\n" + anonymous, "alerts.solve_rate.min_rate", "0 to 1"},
		{"policy action", "feedback:\n  policies:\n    - name: p\n      alerts: [heavy_hitter]\n      action: ban # <-\n" + anonymous,
			"feedback.policies[0].action", `"ban" is not allowed; use one of challenge, deny, allow`},
		{"policy alert type", "feedback:\n  policies:\n    - name: p\n      alerts: [heavy_hiter] # <-\n      action: deny\n" + anonymous,
			"feedback.policies[0].alerts[0]", "one of request_rate, refusal_rate, heavy_hitter"},
		{"policy without name", "feedback:\n  policies:\n    - alerts: [drops] # <-\n      action: deny\n" + anonymous,
			"feedback.policies[0].name", "is missing"},
		{"policy name too long", "feedback:\n  policies:\n    - name: " + strings.Repeat("p", MaxPolicyNameLen+1) + " # <-\n      alerts: [drops]\n      action: deny\n" + anonymous,
			"feedback.policies[0].name", "printable text of at most 121 bytes"},
		{"policy name with a control character", "feedback:\n  policies:\n    - name: \"a\\tb\" # <-\n      alerts: [drops]\n      action: deny\n" + anonymous,
			"feedback.policies[0].name", "printable text"},
		{"policy ttl", "feedback:\n  policies:\n    - name: p\n      alerts: [drops]\n      action: deny\n      ttl: 1s # <-\n" + anonymous,
			"feedback.policies[0].ttl", "1m to 8760h"},
		{"emf sink", "alerts:\n  sinks: {emf: \"file:\"} # <-\n" + anonymous, "alerts.sinks.emf", "stdout, file:PATH"},
		{"cap", "feedback:\n  max_per_hour: -1 # <-\n" + anonymous, "feedback.max_per_hour", "1 to 1000000"},
		{"open alerts cap", "alerts:\n  max_open: 5 # <-\n" + anonymous, "alerts.max_open", `"5" is not allowed; use 10 to 1000000`},
		{"policy list without store", "feedback:\n  dry_run: false\n  policies:\n    - name: p\n      alerts: [heavy_hitter]\n      action: challenge # <-\n" + anonymous,
			"feedback.policies[0].action", `"challenge" names a list with no store, and feedback.dry_run is false; use a list with a store: set lists.challenge_file or lists.table`},
		{"policy deny list without store", "lists: {challenge_file: c.txt}\nchallenge: {enabled: true, secret: " + strings.Repeat("k", 32) + "}\nfeedback:\n  dry_run: false\n  policies:\n    - name: p\n      alerts: [heavy_hitter]\n      action: deny # <-\n" + anonymous,
			"feedback.policies[0].action", "set lists.deny_file or lists.table"},
		{"policy challenge without tokens", "lists: {table: ratewarden-lists}\nfeedback:\n  dry_run: false\n  policies:\n    - name: p\n      alerts: [heavy_hitter]\n      action: challenge # <-\n" + anonymous,
			"feedback.policies[0].action", "needs challenge.enabled: true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := markedLine(tc.yaml)
			e := find(t, check(tc.yaml), tc.key)
			prefix := "test.yaml:" + strconv.Itoa(line) + ": " + tc.key
			if msg := e.Error(); e.Line != line || !strings.HasPrefix(msg, prefix+": ") || !strings.Contains(msg, tc.want) {
				t.Errorf("got  %s\nwant %s: …%s…", msg, prefix, tc.want)
			}
		})
	}
}

// TestFeedbackListsStored: a policy that writes (dry_run false) to a list
// with a store is accepted, and in dry run any list is.
func TestFeedbackListsStored(t *testing.T) {
	for _, y := range []string{
		"lists: {deny_file: d.txt}\nfeedback:\n  dry_run: false\n  policies:\n    - {name: p, alerts: [heavy_hitter], action: deny}\n",
		"lists: {table: ratewarden-lists}\nfeedback:\n  dry_run: false\n  policies:\n    - {name: p, alerts: [heavy_hitter], action: allow}\n",
		"feedback:\n  policies:\n    - {name: p, alerts: [heavy_hitter], action: challenge}\n",
	} {
		if _, err := load([]byte(y+anonymous), "test.yaml"); err != nil {
			t.Errorf("%s: %v", y, err)
		}
	}
}

// TestAlertDefaults: the watched tiers default to every tier but
// anonymous, dry-run is on, and a policy gets its severity and TTL.
func TestAlertDefaults(t *testing.T) {
	c, err := load([]byte(anonymous+"  pro:\n    global: {limit: 10}\n  free:\n    global: {limit: 5}\n"+
		"feedback:\n  policies:\n    - {name: p, alerts: [heavy_hitter], action: challenge}\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Alerts.FalsePositive.Tiers, ","); got != "free,pro" {
		t.Errorf("false_positive.tiers %q, want free,pro", got)
	}
	if !*c.Feedback.DryRun || c.Feedback.MaxPerHour != 20 {
		t.Errorf("feedback defaults: dry_run %v, cap %d", *c.Feedback.DryRun, c.Feedback.MaxPerHour)
	}
	if p := c.Feedback.Policies[0]; p.MinSeverity != "warning" || p.TTL != time.Hour {
		t.Errorf("policy defaults: %q, %v", p.MinSeverity, p.TTL)
	}
}
