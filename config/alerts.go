package config

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/decisions"
)

// Alerts configures the anomaly detectors that read the aggregator's
// windows (`ratewarden aggregate`, `ratewarden alerts`) and where their
// alerts go. Every threshold is per window, of whatever length the
// aggregator rolls up.
type Alerts struct {
	// History is how many recent windows make a series' baseline (median
	// and MAD); default 60.
	History int `yaml:"history"`
	// MinHistory is how many windows a series needs before its rate
	// detectors fire; default 5.
	MinHistory int `yaml:"min_history"`
	// ZScore is the robust z-score ((value − median) ÷ (1.4826 × MAD),
	// with Poisson noise as a floor) above which a rate is anomalous;
	// default 6.
	ZScore float64 `yaml:"z_score"`
	// Ratio is how many times its baseline a rate must also be; default 3.
	Ratio float64 `yaml:"ratio"`
	// MinRequests is the fewest requests (refusals for the refusal rate)
	// in a window for a rate alert; default 100.
	MinRequests int64 `yaml:"min_requests"`
	// EWMAAlpha weighs the newest window in the exponentially weighted
	// mean reported beside the median; default 0.1.
	EWMAAlpha float64 `yaml:"ewma_alpha"`
	// SeasonalWeeks is how many weeks of history an hour of the week
	// needs before its own profile joins the baseline; default 1.
	SeasonalWeeks int `yaml:"seasonal_weeks"`
	// Cooldown is how long after an alert resolves the same alert (same
	// key) stays quiet; default 10m.
	Cooldown time.Duration `yaml:"cooldown"`
	// ResolveAfter is how many windows in a row a condition must be clear
	// before its alert resolves; default 2.
	ResolveAfter int `yaml:"resolve_after"`
	// MaxSeries bounds the series (tier × rule × measure) kept; the least
	// recently seen go first. Default 10000.
	MaxSeries int `yaml:"max_series"`
	// MaxOpen bounds the alerts firing at once, which the state keeps and
	// saves after every window: a client making a new identity each
	// window, each a heavy hitter, would otherwise keep what every window
	// can raise open for resolve_after windows. With MaxOpen open, the
	// open ones are kept and a new alert is neither opened nor raised,
	// only counted as dropped (it is raised in a later window its
	// condition holds with room); when a window's new alerts do not all
	// fit, the most severe are opened first, then by key. It bounds the
	// cooldowns kept as well: past it those ending soonest are dropped,
	// and their alerts may be raised again early. Default 10000.
	MaxOpen int `yaml:"max_open"`
	// PayingTiers are the tiers of paying users: their refusals alert
	// (false_positive, critical) and no policy acts on them without a
	// person's approval. No default.
	PayingTiers []string `yaml:"paying_tiers"`

	HeavyHitter        HeavyHitterAlert        `yaml:"heavy_hitter"`
	CredentialStuffing CredentialStuffingAlert `yaml:"credential_stuffing"`
	FalsePositive      FalsePositiveAlert      `yaml:"false_positive"`
	FailOpen           CountAlert              `yaml:"fail_open"`
	Drops              CountAlert              `yaml:"drops"`
	SolveRate          SolveRateAlert          `yaml:"solve_rate"`
	Unsolved           CountAlert              `yaml:"unsolved"`
	Sinks              AlertSinks              `yaml:"sinks"`
}

// HeavyHitterAlert fires for an identity among a rule's top requesters
// with more than Factor × the rule's limit in a window.
type HeavyHitterAlert struct {
	Factor float64 `yaml:"factor"` // default 5
}

// CredentialStuffingAlert fires for a rule that many clients, each under
// the limit, hit far above its baseline.
type CredentialStuffingAlert struct {
	MinClients int64   `yaml:"min_clients"` // distinct clients on the rule in a window; default 100
	Ratio      float64 `yaml:"ratio"`       // requests and clients over their baselines; default 5
}

// FalsePositiveAlert fires when refusals of an authenticated or paying
// tier rise above their baseline.
type FalsePositiveAlert struct {
	// Tiers are the authenticated tiers watched besides the paying ones;
	// default every configured tier but anonymous.
	Tiers       []string `yaml:"tiers"`
	MinRefusals int64    `yaml:"min_refusals"` // refusals in a window; default 1
}

// CountAlert fires when a count in a window reaches Min.
type CountAlert struct {
	Min int64 `yaml:"min"` // fail_open default 10, drops 1, unsolved 10
}

// SolveRateAlert fires for a rule whose challenges are rarely solved.
type SolveRateAlert struct {
	MinChallenges int64   `yaml:"min_challenges"` // challenges in a window before the rate counts; default 20
	MinRate       float64 `yaml:"min_rate"`       // token passes ÷ challenges below this alert; default 0.05
}

// AlertSinks say where alerts go; none set: the JSON lines go to standard
// output.
type AlertSinks struct {
	File    string       `yaml:"file"` // JSON lines appended to this file; "-" is standard output
	Webhook AlertWebhook `yaml:"webhook"`
	EMF     string       `yaml:"emf"` // the metric Alerts by type and severity: stdout, file:PATH, agent:..., logs:GROUP or metrics
}

// AlertWebhook posts each alert as Slack-compatible JSON ({"text": ...}).
type AlertWebhook struct {
	URL      string        `yaml:"url"`       // "" disables
	Queue    int           `yaml:"queue"`     // alerts waiting to be posted; more are dropped and counted; default 256
	Timeout  time.Duration `yaml:"timeout"`   // of one post; default 5s
	Attempts int           `yaml:"attempts"`  // posts of one alert before it is dropped; default 5
	Backoff  time.Duration `yaml:"backoff"`   // first wait between attempts, doubling with jitter; default 500ms
	MaxDelay time.Duration `yaml:"max_delay"` // longest wait between attempts; default 30s
}

// Feedback configures the policies that turn alerts into list entries the
// edge obeys, written to the lists the lists section names.
type Feedback struct {
	// DryRun records what the policies would have done and changes no
	// list; default true, so that a new policy is watched before it acts.
	DryRun *bool `yaml:"dry_run"`
	// MaxPerHour caps the entries applied in an hour of event time;
	// further actions are recorded as not applied (cap_reached). Default 20.
	MaxPerHour int `yaml:"max_per_hour"`
	// Actions is the JSON-lines file of every action record; "" keeps them
	// beside the alerts.
	Actions string `yaml:"actions"`
	// Policies write list entries only: the edge that reads the lists
	// records each change as one feedback event in its decisions.
	Policies []FeedbackPolicy `yaml:"policies"`
}

// MaxPolicyNameLen is the longest feedback policy name: the list entries
// a policy writes name it as "policy:" + name, and a list holds at most
// 128 bytes of printable text there (edge/lists.MaxByLen).
const MaxPolicyNameLen = 128 - len("policy:")

// FeedbackPolicy maps alerts of some types, at or above a severity, to an
// action on their identities.
type FeedbackPolicy struct {
	Name        string        `yaml:"name"`         // required; entries say "policy:<name>"
	Alerts      []string      `yaml:"alerts"`       // alert types, such as heavy_hitter; required
	MinSeverity string        `yaml:"min_severity"` // info, warning (default) or critical
	Action      string        `yaml:"action"`       // challenge, deny, or allow (a proposal a person approves)
	TTL         time.Duration `yaml:"ttl"`          // how long the entry applies; default 1h
}

// The allowed values of the alert and feedback keys.
var (
	// AlertTypes are the detectors' alert types.
	AlertTypes = []string{"request_rate", "refusal_rate", "heavy_hitter", "credential_stuffing", "false_positive",
		"fail_open_surge", "drops", "low_solve_rate", "unsolved_challenges"}
	// AlertSeverities are the severities, least first.
	AlertSeverities = []string{"info", "warning", "critical"}
	// FeedbackActions are the lists a policy writes to.
	FeedbackActions = []string{"challenge", "deny", "allow"}
)

// alertDefaults fills the alerts and feedback sections' defaults.
func (c *Config) alertDefaults() {
	a := &c.Alerts
	def(&a.History, 60)
	def(&a.MinHistory, 5)
	def(&a.ZScore, 6)
	def(&a.Ratio, 3)
	def(&a.MinRequests, 100)
	def(&a.EWMAAlpha, 0.1)
	def(&a.SeasonalWeeks, 1)
	def(&a.Cooldown, 10*time.Minute)
	def(&a.ResolveAfter, 2)
	def(&a.MaxSeries, 10_000)
	def(&a.MaxOpen, 10_000)
	def(&a.HeavyHitter.Factor, 5)
	def(&a.CredentialStuffing.MinClients, 100)
	def(&a.CredentialStuffing.Ratio, 5)
	if _, written := c.lines["alerts.false_positive.tiers"]; !written && a.FalsePositive.Tiers == nil {
		for name := range c.Tiers {
			if name != TierAnonymous {
				a.FalsePositive.Tiers = append(a.FalsePositive.Tiers, name)
			}
		}
		slices.Sort(a.FalsePositive.Tiers)
	}
	def(&a.FalsePositive.MinRefusals, 1)
	def(&a.FailOpen.Min, 10)
	def(&a.Drops.Min, 1)
	def(&a.Unsolved.Min, 10)
	def(&a.SolveRate.MinChallenges, 20)
	def(&a.SolveRate.MinRate, 0.05)
	w := &a.Sinks.Webhook
	def(&w.Queue, 256)
	def(&w.Timeout, 5*time.Second)
	def(&w.Attempts, 5)
	def(&w.Backoff, 500*time.Millisecond)
	def(&w.MaxDelay, 30*time.Second)

	f := &c.Feedback
	if f.DryRun == nil {
		f.DryRun = new(true)
	}
	def(&f.MaxPerHour, 20)
	for i := range f.Policies {
		p := &f.Policies[i]
		def(&p.MinSeverity, "warning")
		def(&p.TTL, time.Hour)
	}
}

func (v *validator) alerts(a *Alerts, tiers map[string]*Tier) {
	v.intRange(key("alerts", "history"), int64(a.History), 3, 10_000)
	v.intRange(key("alerts", "min_history"), int64(a.MinHistory), 1, int64(max(a.History, 1)))
	v.floatRange(key("alerts", "z_score"), a.ZScore, 1, 1000)
	v.floatRange(key("alerts", "ratio"), a.Ratio, 1, 1e6)
	v.intRange(key("alerts", "min_requests"), a.MinRequests, 1, 1e12)
	v.floatRange(key("alerts", "ewma_alpha"), a.EWMAAlpha, 0.001, 1)
	v.intRange(key("alerts", "seasonal_weeks"), int64(a.SeasonalWeeks), 1, 52)
	v.durationRange(key("alerts", "cooldown"), a.Cooldown, 0, 7*24*time.Hour)
	v.intRange(key("alerts", "resolve_after"), int64(a.ResolveAfter), 1, 1000)
	v.intRange(key("alerts", "max_series"), int64(a.MaxSeries), 10, 10_000_000)
	v.intRange(key("alerts", "max_open"), int64(a.MaxOpen), 10, 1_000_000)
	for i, t := range a.PayingTiers {
		v.tierName(key("alerts", "paying_tiers", index(i)), t, tiers)
	}
	v.floatRange(key("alerts", "heavy_hitter", "factor"), a.HeavyHitter.Factor, 1, 1e6)
	v.intRange(key("alerts", "credential_stuffing", "min_clients"), a.CredentialStuffing.MinClients, 2, 1e12)
	v.floatRange(key("alerts", "credential_stuffing", "ratio"), a.CredentialStuffing.Ratio, 1, 1e6)
	for i, t := range a.FalsePositive.Tiers {
		v.tierName(key("alerts", "false_positive", "tiers", index(i)), t, tiers)
	}
	v.intRange(key("alerts", "false_positive", "min_refusals"), a.FalsePositive.MinRefusals, 1, 1e12)
	v.intRange(key("alerts", "fail_open", "min"), a.FailOpen.Min, 1, 1e12)
	v.intRange(key("alerts", "drops", "min"), a.Drops.Min, 1, 1e12)
	v.intRange(key("alerts", "unsolved", "min"), a.Unsolved.Min, 1, 1e12)
	v.intRange(key("alerts", "solve_rate", "min_challenges"), a.SolveRate.MinChallenges, 1, 1e12)
	v.floatRange(key("alerts", "solve_rate", "min_rate"), a.SolveRate.MinRate, 0, 1)
	w := &a.Sinks.Webhook
	if w.URL != "" {
		if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.report(key("alerts", "sinks", "webhook", "url"), w.URL, "is not allowed", "an http:// or https:// URL")
		}
	}
	v.intRange(key("alerts", "sinks", "webhook", "queue"), int64(w.Queue), 1, 1_000_000)
	v.durationRange(key("alerts", "sinks", "webhook", "timeout"), w.Timeout, 100*time.Millisecond, 5*time.Minute)
	v.intRange(key("alerts", "sinks", "webhook", "attempts"), int64(w.Attempts), 1, 100)
	v.durationRange(key("alerts", "sinks", "webhook", "backoff"), w.Backoff, time.Millisecond, time.Hour)
	v.durationRange(key("alerts", "sinks", "webhook", "max_delay"), w.MaxDelay, w.Backoff, 24*time.Hour)
	if e := a.Sinks.EMF; e != "" {
		kind, arg, _ := strings.Cut(e, ":")
		if !(e == "stdout" || e == "metrics" || (kind == "file" || kind == "agent" || kind == "logs") && arg != "") {
			v.report(key("alerts", "sinks", "emf"), e, "is not allowed", "stdout, file:PATH, agent:tcp://HOST:PORT, agent:udp://HOST:PORT, logs:GROUP or metrics")
		}
	}
}

func (v *validator) feedback(f *Feedback) {
	v.intRange(key("feedback", "max_per_hour"), int64(f.MaxPerHour), 1, 1_000_000)
	names := map[string]bool{}
	for i := range f.Policies {
		p := &f.Policies[i]
		at := func(k string) []string { return key("feedback", "policies", index(i), k) }
		switch {
		case p.Name == "":
			v.report(at("name"), "", "is missing", "a name for the entries' \"by\", such as challenge-scrapers")
		case names[p.Name]:
			v.report(at("name"), p.Name, "names two policies", "a name of its own")
		case len(p.Name) > MaxPolicyNameLen || strings.IndexFunc(p.Name, decisions.IsControl) >= 0 || !utf8.ValidString(p.Name):
			v.report(at("name"), p.Name, "is not allowed",
				"printable text of at most "+strconv.Itoa(MaxPolicyNameLen)+" bytes: the entries it writes say by=\"policy:NAME\", and a list holds at most 128 bytes there")
		}
		names[p.Name] = true
		if len(p.Alerts) == 0 {
			v.report(at("alerts"), "", "is missing", "alert types: one or more of "+strings.Join(AlertTypes, ", "))
		}
		for j, t := range p.Alerts {
			v.oneOf(key("feedback", "policies", index(i), "alerts", index(j)), t, AlertTypes)
		}
		v.oneOf(at("min_severity"), p.MinSeverity, AlertSeverities)
		v.oneOf(at("action"), p.Action, FeedbackActions)
		v.durationRange(at("ttl"), p.TTL, time.Minute, 365*24*time.Hour)
	}
}

// feedbackLists checks that, with feedback.dry_run false, every policy's
// list has a store the policies can write and the edge reads: the lists
// table, or the list's file (and, for the challenge list, challenge
// tokens, without which the edge does not read it).
func (v *validator) feedbackLists(c *Config) {
	f := &c.Feedback
	if f.DryRun == nil || *f.DryRun {
		return
	}
	files := map[string]string{"allow": c.Lists.AllowFile, "deny": c.Lists.DenyFile, "challenge": c.Lists.ChallengeFile}
	for i, p := range f.Policies {
		path, known := files[p.Action]
		if !known {
			continue // reported by feedback
		}
		at := key("feedback", "policies", index(i), "action")
		switch {
		case c.Lists.Table == "" && path == "":
			v.report(at, p.Action, "names a list with no store, and feedback.dry_run is false",
				"a list with a store: set lists."+p.Action+"_file or lists.table, or keep feedback.dry_run: true")
		case p.Action == "challenge" && !c.Challenge.Enabled:
			v.report(at, p.Action, "needs challenge.enabled: true, and feedback.dry_run is false",
				"challenge.enabled: true, so the edge reads the challenge list, or keep feedback.dry_run: true")
		}
	}
}

// tierName checks that name is a configured tier.
func (v *validator) tierName(segs []string, name string, tiers map[string]*Tier) {
	if _, ok := tiers[name]; !ok {
		names := make([]string, 0, len(tiers))
		for n := range tiers {
			names = append(names, n)
		}
		slices.Sort(names)
		v.report(segs, name, "names no tier", "one of "+strings.Join(names, ", "))
	}
}

func (v *validator) floatRange(segs []string, got, lo, hi float64) {
	if got >= lo && got <= hi {
		return
	}
	v.report(segs, strconv.FormatFloat(got, 'g', -1, 64), "is not allowed",
		strconv.FormatFloat(lo, 'g', -1, 64)+" to "+strconv.FormatFloat(hi, 'g', -1, 64))
}
