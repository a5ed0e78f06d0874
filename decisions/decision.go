// Package decisions defines the decision event: the record of one allow,
// block or challenge decision made by the edge, and its codecs.
//
// The schema is versioned. Fields are only ever added, never renamed, never
// reused with another meaning; a reader that meets a version newer than
// [Version] reads the fields it knows and reports the version.
package decisions

import (
	"net/netip"
	"time"
)

// Version is the schema version written into every encoded decision.
// Version 2 added Status, UpstreamLatency and ResponseError.
const Version = 2

// Outcome is what the edge did with a request.
type Outcome uint8

// The outcomes. The zero value is not a valid outcome.
const (
	Allow       Outcome = iota + 1 // within every limit
	Block                          // over a limit: 429
	Challenge                      // over a limit but under factor × limit: 302 to the challenge page
	AllowListed                    // on the allow list: limits bypassed
	DenyListed                     // on the deny list: 403
	TokenPass                      // would have been challenged, passed on a valid challenge token
	FailOpen                       // the store failed and the path fails open: passed
	FailClosed                     // the store failed and the path fails closed: 503
	LocalLimit                     // the store is unavailable and the local fallback limit refused: 429
	ShadowBlock                    // a shadow rule would have refused: passed, recorded only
	Rejected                       // a path with no canonical form, or an ambiguous one the edge refuses: 400
	numOutcomes
)

// NumOutcomes is one more than the largest Outcome, for arrays indexed by Outcome.
const NumOutcomes = int(numOutcomes)

var outcomeNames = [...]string{
	Allow:       "allow",
	Block:       "block",
	Challenge:   "challenge",
	AllowListed: "allow_listed",
	DenyListed:  "deny_listed",
	TokenPass:   "token_pass",
	FailOpen:    "fail_open",
	FailClosed:  "fail_closed",
	LocalLimit:  "local_limit",
	ShadowBlock: "shadow_block",
	Rejected:    "rejected",
}

// String returns the outcome's wire name, such as "allow" or "shadow_block".
func (o Outcome) String() string {
	if o == 0 || int(o) >= len(outcomeNames) {
		return "unknown"
	}
	return outcomeNames[o]
}

// Name is the outcome's name as written in events: String, or "" for the
// zero Outcome, which events other than decisions carry.
func (o Outcome) Name() string {
	if o == 0 {
		return ""
	}
	return o.String()
}

// ParseOutcome returns the outcome whose wire name is s.
func ParseOutcome(s string) (Outcome, bool) {
	for i, n := range outcomeNames {
		if n == s && i != 0 {
			return Outcome(i), true
		}
	}
	return 0, false
}

// Passed reports whether a request with this outcome reaches the origin.
func (o Outcome) Passed() bool {
	switch o {
	case Allow, AllowListed, TokenPass, FailOpen, ShadowBlock:
		return true
	}
	return false
}

// Kind is what an event of the decision log records.
type Kind uint8

// The kinds. The zero value is a decision, so that the edge never sets it.
const (
	KindDecision Kind = iota // a decision about one request
	KindFeedback             // an identity put on or taken off a feedback list
	KindDrops                // a report of decisions the emitter dropped
	numKinds
)

var kindNames = [...]string{KindDecision: "decision", KindFeedback: "feedback", KindDrops: "drops"}

// String returns the kind's wire name.
func (k Kind) String() string {
	if int(k) >= len(kindNames) {
		return "unknown"
	}
	return kindNames[k]
}

// ParseKind returns the kind whose wire name is s.
func ParseKind(s string) (Kind, bool) {
	for i, n := range kindNames {
		if n == s {
			return Kind(i), true
		}
	}
	return 0, false
}

// Decision is one event of the decision log: most often the edge's decision
// about one request (Kind KindDecision, the zero value), else a feedback
// action or a drop report, which use Time, Node, Reason and the fields of
// their own section. One flat value for every kind keeps the codecs, the
// columnar schema and replay simple; fields a kind does not use are zero.
//
// It is a plain value: copying it is how it is handed over, and it holds no
// pointers into mutable state. The strings it holds may share memory with
// the request.
type Decision struct {
	Kind      Kind
	Time      time.Time // when the request was decided (or the event happened)
	RequestID string    // from the configured request-id header, or generated
	Node      string    // the edge node that decided

	ClientIP       netip.Addr // resolved client address (possibly truncated or pseudonymised by a later stage)
	UserID         string     // authenticated user, empty for anonymous clients
	Plan           string     // the user's plan as presented, empty if none
	Tier           string     // the tier whose rules applied
	IdentitySource string     // how the identity was established; see the Source constants

	Method string
	Host   string
	Path   string

	Rule      string        // the rule that determined the outcome, such as "anonymous:/api/reports"
	Algorithm string        // that rule's algorithm, such as "fixed_window"
	Limit     int64         // that rule's limit
	Window    time.Duration // that rule's window
	Count     int64         // the count the rule saw, this request included
	Remaining int64         // requests left in the window (never negative)
	Reset     time.Duration // time until the window resets or the bucket refills

	Outcome      Outcome
	Reason       string        // why, in a few words
	StoreLatency time.Duration // time spent in the counter store; zero for in-process stores

	// Privacy says how ClientIP and UserID were recorded, as
	// "<address mode>/<user mode>", such as "truncate/hmac"; see Privacy.
	// Empty means as decided (kept).
	Privacy string

	// What happened after the decision, recorded when the response ended
	// (schema version 2; zero in events of version 1).
	Status          int           // HTTP status sent to the client; 0 if the client left before a response began
	UpstreamLatency time.Duration // from handing the request to the origin (its body received) to the origin's response headers or failure; 0 when not forwarded
	ResponseError   string        // why the response is not the origin's whole answer; see the Response error constants; "" when it is

	// Feedback events (KindFeedback): Action on List for Target, for TTL
	// (0: until removed). Reason says why; Node says who.
	List   string        // "allow", "deny" or "challenge"
	Action string        // "add" or "remove"
	Target string        // an address, a CIDR, or "user:<id>"
	TTL    time.Duration //

	// Drop reports (KindDrops): decisions dropped since the previous report.
	Dropped uint64
}

// Response errors recorded in Decision.ResponseError. Those of the origin
// start with "upstream_", those of the client otherwise.
const (
	UpstreamTimeout     = "upstream_timeout"      // no response headers within the upstream timeout: 504
	UpstreamReadTimeout = "upstream_read_timeout" // the origin stalled mid-body: a read of its response body did not complete within the read timeout; the client's response was aborted
	UpstreamUnreachable = "upstream_unreachable"  // no connection to the origin (refused, unreachable, connect timeout): 502
	UpstreamFailed      = "upstream_error"        // the origin broke the exchange (reset, malformed response): 502
	BodyTimeout         = "body_timeout"          // the client did not send its request body in time: 408
	BodyTooLarge        = "body_too_large"        // the request body exceeded the configured cap: 413
	ClientClosed        = "client_closed"         // the client went away before the response ended
	SendTimeout         = "send_timeout"          // the client did not accept a write of the response in time (it stopped reading): its connection was closed
)

// Identity sources recorded in Decision.IdentitySource.
const (
	SourcePeer            = "peer"             // the TCP peer address
	SourceForwarded       = "forwarded"        // a forwarding header set by a trusted proxy
	SourceHeader          = "header"           // user headers set by a trusted proxy
	SourceJWT             = "jwt"              // a verified JWT
	SourceUntrustedHeader = "untrusted_header" // user headers from an untrusted peer, ignored: anonymous
	SourceInvalidJWT      = "invalid_jwt"      // a JWT that failed verification, ignored: anonymous
)
