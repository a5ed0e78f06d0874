package lists

import "time"

// The lists an Entry can be on.
const (
	Allow     = "allow"     // limits bypassed
	Deny      = "deny"      // refused with 403
	Challenge = "challenge" // challenged on the next request whatever its count, passes with a valid token
)

// Names are the lists, in the order they are checked at the edge.
var Names = []string{Deny, Allow, Challenge}

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
	// Removed, when not zero, marks a removed entry kept as a tombstone
	// for TombstoneAge, so that readers learn who removed it (By) and
	// record the removal; it never applies.
	Removed time.Time
}

// Applies reports whether e applies at now: not pending, not removed and
// not expired.
func (e *Entry) Applies(now time.Time) bool {
	return !e.Pending && e.Removed.IsZero() && (e.Expires.IsZero() || now.Before(e.Expires))
}

// TombstoneAge is how long a removed entry stays in its store as a
// tombstone: long enough for every reader to see it on a refresh.
const TombstoneAge = 24 * time.Hour
