package lists

import "time"

// The lists an Entry can be on.
const (
	Allow     = "allow"     // limits bypassed
	Deny      = "deny"      // refused with 403
	Challenge = "challenge" // challenged on the next request whatever its count, passes with a valid token
)

// Entry is one entry of a feedback list, as its writers (people through
// `ratewarden lists`, the aggregator's feedback policies) record it.
type Entry struct {
	List    string    // Allow, Deny or Challenge
	Target  string    // an address, a CIDR prefix, or user:<id>
	Expires time.Time // when the entry stops applying; zero: until removed
	Reason  string    // why, for people: "alert heavy_hitter anonymous:/api/reports"
	By      string    // who or what wrote it: a person's name, "policy:<name>"
	Added   time.Time // when it was written
	// Pending marks a proposed entry that applies only once a person
	// approves it (an allow-list proposal, an action on a paying tier).
	Pending bool
}
