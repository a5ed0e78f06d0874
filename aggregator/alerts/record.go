// Package alerts detects anomalies in the aggregator's windows and reports
// them: alerts with evidence, deduplicated and resolved, and the feedback
// actions configured policies take on them.
package alerts

import "time"

// Alert is one alert record: raised (State "firing") when a detector's
// condition holds over a window, and once more (State "resolved") when it
// clears. Written as one JSON object per line, with the field names below.
type Alert struct {
	Kind        string    `json:"kind"`     // "alert"
	Time        time.Time `json:"time"`     // the event time of the window that raised or resolved it (its end)
	Type        string    `json:"type"`     // the detector: heavy_hitter, refusal_rate, credential_stuffing, false_positive, fail_open_surge, drops, low_solve_rate, ...
	Severity    string    `json:"severity"` // info, warning, critical
	State       string    `json:"state"`    // firing or resolved
	Key         string    `json:"key"`      // the deduplication key: type and subject, such as "heavy_hitter/anonymous/ip:203.0.113.7"
	Tier        string    `json:"tier,omitempty"`
	Rule        string    `json:"rule,omitempty"`
	Summary     string    `json:"summary"`              // one line for people
	WindowStart time.Time `json:"window_start"`         // first window of the evidence
	WindowEnd   time.Time `json:"window_end"`           // end of the last window of the evidence
	Identities  []string  `json:"identities,omitempty"` // top identities involved: addresses, CIDRs or user:<id>
	Evidence    Evidence  `json:"evidence"`             // what the detector saw
}

// Evidence is what a detector saw: the observed value, its baseline and the
// counts behind them.
type Evidence struct {
	Observed float64           `json:"observed"`
	Baseline float64           `json:"baseline"`
	Score    float64           `json:"score,omitempty"` // robust z-score, ratio to limit, ...
	Counts   map[string]uint64 `json:"counts,omitempty"`
}

// Action is one feedback action a policy took (or, in dry-run mode, would
// have taken) on an alert; also one JSON object per line, beside the alerts.
type Action struct {
	Kind    string    `json:"kind"`   // "action"
	Time    time.Time `json:"time"`   // event time of the alert that caused it
	Policy  string    `json:"policy"` // the policy's name
	Alert   string    `json:"alert"`  // the alert's Key
	List    string    `json:"list"`   // allow, deny or challenge
	Target  string    `json:"target"` // address, CIDR or user:<id>
	TTL     string    `json:"ttl,omitempty"`
	Applied bool      `json:"applied"`       // false when dry-run, pending approval or refused by a guard rail
	Why     string    `json:"why,omitempty"` // why not applied: dry_run, needs_approval, cap_reached, allow_listed, paying_tier, stronger_entry, write_failed, read_failed
}
