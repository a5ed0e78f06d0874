// Package lists holds the feedback lists the edge obeys (allow, deny and
// challenge): sets of addresses, CIDR prefixes and user ids with an expiry,
// read from files or a DynamoDB table and refreshed, and the stores that
// write them (FileStore, TableStore) for people (`ratewarden lists`) and the
// aggregator's feedback policies.
//
// # File format
//
// One list a file, one entry a line: a target, then optional key=value
// attributes.
//
//	203.0.113.7          an IPv4 or IPv6 address
//	198.51.100.0/24      a CIDR prefix, IPv4 or IPv6, with no host bits set
//	user:alice           an authenticated user id
//	# a comment          '#' outside quotes starts a comment
//	user:bob expires=2026-12-01T18:00:00Z added=2026-12-01T17:30:00Z by=alice reason="scraper alert"
//	"user:carol smith" pending=true by=policy:stuffing
//	203.0.113.9 removed=2026-12-01T17:40:00Z by=alice
//
// A field (target or value) is bare, or a Go double-quoted string when it
// holds spaces, quotes, '#', '=' or anything unprintable; writers quote what
// needs it, so a value can never end its line or start another entry. The
// attributes are expires, added and removed (RFC 3339 times, UTC), by and
// reason (printable text, at most MaxByLen and MaxReasonLen bytes) and
// pending (true or false). A line with only a target is an entry that
// applies until removed: files of the older one-entry-a-line format read
// as before.
//
// An entry applies while it is not pending, not removed and not expired:
// readers compare expires with the time of each request, whatever the
// store (DynamoDB deletes expired items only some time later). A removed
// entry stays as a tombstone for TombstoneAge, so that every reader sees
// who removed it; a FileStore's write drops it after that, and the entries
// expired longer ago than that (as DynamoDB's time to live deletes them),
// so that a file the feedback policies write does not keep every target
// they ever listed. Blank lines are ignored and surrounding whitespace is
// trimmed. IPv4-mapped IPv6 targets (::ffff:203.0.113.7), and those in
// NAT64's well-known prefix (64:ff9b::203.0.113.7), are stored as IPv4,
// since clients are. One in a site's own NAT64 prefix
// (identity.nat64_prefixes) is stored as written, since writers do not
// know every edge's setting, and read as IPv4 by an edge that has it
// (NewNAT64, WatchOptions.NAT64); Alike finds the entries such an edge
// reads as one target, for a writer that removes or approves a client
// whatever spelling its entries were written in. A bad line rejects the whole file with
// its file:line, so that a typo never half-applies a list; a watcher then
// keeps the last good list.
//
// # Recording changes
//
// Every change to a list is a feedback event in the decision stream, so
// lists can be rebuilt by replay; each is recorded once, by one rule: the
// process that owns the decision stream records, and that is the edge that
// reads the lists. The local decision log has one writer (the edge holds
// its LOCK), so a writer in another process (`ratewarden lists`, the
// aggregator's policies) cannot append to it; instead, on every refresh a
// Watcher compares the entries that apply with those it recorded last and
// hands one event per change to its Recorder (see Diff), and keeps what it
// recorded in a state file (WatchOptions.StateFile, beside the log), so that
// changes made while the edge was stopped are recorded when it starts.
// Writers only write their store. Edges that share a lists table and a
// Kinesis stream let one of them record (config lists.record).
//
// Two changes between refreshes to one target are one change (an add and
// a remove between two reads record nothing); expiry is no change, since
// an add event carries its TTL.

package lists

import (
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/internal/clientip"
)

// Bounds on what Parse reads.
const (
	MaxLineLen = 4 << 10                // bytes in one line
	MaxEntries = 1 << 20                // entries in one list
	MaxUserLen = decisions.MaxUserIDLen // bytes in a user id, as identity believes them
	userPrefix = "user:"
	maxQuoted  = 64 // bytes of a bad line quoted in an error
)

// never is the expiry of an entry without one.
const never = int64(1<<63 - 1)

// List is a parsed list. It is immutable and safe for concurrent use. The
// zero value and the nil *List contain nothing.
type List struct {
	// prefixes holds every address and prefix, masked, with the Unix
	// nanoseconds at which it expires; an address is a full-length prefix.
	// Contains looks an address up once per prefix length in use, so its
	// cost depends on how many lengths a list uses (at most 33 + 129), not
	// on how many entries it has.
	prefixes map[netip.Prefix]int64
	bits4    []int // prefix lengths in use for IPv4, longest first
	bits6    []int // prefix lengths in use for IPv6, longest first
	users    map[string]int64
	entries  []Entry        // as read, pending and removed ones included
	read     time.Time      // when the list was read
	nat      clientip.NAT64 // the NAT64 prefixes addresses and entries are read through
	wide     []WideEntry    // entries that hold a network-specific prefix of nat
}

// Parse reads a list from r at time now. name is the file name for error
// messages. A bad line is an error naming name:line, the text and what is
// allowed, and rejects the whole list.
func Parse(r io.Reader, name string) (*List, error) {
	return ParseAt(r, name, "", time.Now())
}

// ParseAt is Parse for list named list, read at now.
func ParseAt(r io.Reader, name, list string, now time.Time) (*List, error) {
	es, err := ParseEntries(r, name, list)
	if err != nil {
		return nil, err
	}
	return New(es, now), nil
}

// New builds a list of the entries, read at now, as an edge without
// identity.nat64_prefixes reads it: NewNAT64 with the zero NAT64.
func New(es []Entry, now time.Time) *List { return NewNAT64(es, now, clientip.NAT64{}) }

// NewNAT64 builds a list of the entries, read at now, through the NAT64
// prefixes nat, as the edge reads client addresses: an address or prefix
// inside one of nat's network-specific prefixes, no shorter than it, is
// the IPv4 address or prefix it carries (clientip.NAT64.Prefix:
// 2001:db8:64::203.0.113.0/120 inside a /96 is 203.0.113.0/24, as is
// 2001:db8:122:344:cb:71::/96 inside a /64), so that an entry matches the
// same clients on every edge, whether it reads that prefix as IPv4 or
// not. What is stored is not changed: Entries returns the targets as
// written. A shorter prefix that holds one of nat's prefixes stays IPv6
// and is reported by Wide.
//
// The entries must have normalized targets (as ParseEntries and the stores
// return them); one that does not is left out. Of several entries for one
// address or prefix (as read: 203.0.113.66 and 2001:db8:64::cb00:7142 are
// one) the longest-lived applies; a pending or removed one is left out
// whatever the others say.
func NewNAT64(es []Entry, now time.Time, nat clientip.NAT64) *List {
	l := &List{prefixes: map[netip.Prefix]int64{}, users: map[string]int64{}, entries: es, read: now, nat: nat}
	for i := range es {
		e := &es[i]
		if e.Pending || !e.Removed.IsZero() {
			continue
		}
		exp := never
		if !e.Expires.IsZero() {
			exp = unixNano(e.Expires)
		}
		if id, ok := cutUser(e.Target); ok {
			l.users[id] = max(l.users[id], exp)
			continue
		}
		p, ok := readPrefix(e.Target, nat)
		if !ok {
			continue
		}
		old, seen := l.prefixes[p]
		if s, ok := nat.HeldBy(p); ok && !seen {
			l.wide = append(l.wide, WideEntry{Target: e.Target, NAT64: s})
		}
		l.prefixes[p] = max(old, exp)
	}
	l.bits4 = lengths(l.prefixes, true)
	l.bits6 = lengths(l.prefixes, false)
	return l
}

// readPrefix returns the address or prefix an edge reading through nat
// reads target, a normalized address or prefix, as (an address as a prefix
// of all its bits); false for a user id or any other text.
func readPrefix(target string, nat clientip.NAT64) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(target)
	if err != nil {
		a, aerr := netip.ParseAddr(target)
		if aerr != nil {
			return netip.Prefix{}, false
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if q, err := nat.Prefix(p); err == nil {
		p = q
	}
	return p, true
}

// writeTarget writes p as a target: an address of one IP without its
// length.
func writeTarget(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// NAT64Target returns the IPv4 address or prefix, written as a target,
// that an edge reading through nat reads target as when target lies in one
// of nat's network-specific prefixes (through 2001:db8:64::/96,
// 2001:db8:64::cb00:7142 is 203.0.113.66 and 2001:db8:64::cb00:7100/120 is
// 203.0.113.0/24), and "" for every other target: one that every edge
// reads alike, as written. target must be normalized (NormalizeTarget).
func NAT64Target(target string, nat clientip.NAT64) string {
	p, ok := readPrefix(target, nat)
	if !ok || !p.Addr().Is4() || !strings.Contains(target, ":") {
		return ""
	}
	return writeTarget(p)
}

// Alike returns the entries of es that an edge reading through nat reads
// as it reads target, in the order of es: for an address or prefix, those
// read as the same address or prefix (203.0.113.66 and
// 2001:db8:64::cb00:7142 through 2001:db8:64::/96; not 203.0.113.0/24,
// which holds it, nor an address outside nat's prefixes), and for a user
// id, its entries. target and the entries' targets must be normalized
// (NormalizeTarget), as the stores return them. Entries of every state
// are returned.
func Alike(es []Entry, target string, nat clientip.NAT64) []Entry {
	want, ok := readPrefix(target, nat)
	var out []Entry
	for _, e := range es {
		if p, pok := readPrefix(e.Target, nat); e.Target == target || ok && pok && p == want {
			out = append(out, e)
		}
	}
	return out
}

// unixNano is t in Unix nanoseconds, clamped to what an int64 holds
// (1678 to 2262): an expiry past 2262 is never reached.
func unixNano(t time.Time) int64 {
	switch {
	case t.After(maxNano):
		return never
	case t.Before(minNano):
		return math.MinInt64
	}
	return t.UnixNano()
}

var (
	maxNano = time.Unix(0, math.MaxInt64)
	minNano = time.Unix(0, math.MinInt64)
)

func cutUser(target string) (string, bool) { return cutPrefix(target, userPrefix) }

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return s, false
}

func quote(s string) string {
	if len(s) > maxQuoted {
		return fmt.Sprintf("%q...", s[:maxQuoted])
	}
	return fmt.Sprintf("%q", s)
}

// lengths returns the prefix lengths in use for one family, longest first.
func lengths(m map[netip.Prefix]int64, v4 bool) []int {
	var seen [129]bool
	for p := range m {
		if p.Addr().Is4() == v4 {
			seen[p.Bits()] = true
		}
	}
	var out []int
	for b := len(seen) - 1; b >= 0; b-- {
		if seen[b] {
			out = append(out, b)
		}
	}
	return slices.Clip(out)
}

// Contains reports whether the list holds addr (as an address or inside a
// prefix) or user (when not "") at the time it was read. An address that
// carries an IPv4 address, IPv4-mapped or in one of the NAT64 prefixes the
// list was read through, is that IPv4 address. It is nil-safe and does
// not allocate.
func (l *List) Contains(addr netip.Addr, user string) bool {
	if l == nil {
		return false
	}
	return l.ContainsAt(addr, user, l.read)
}

// ContainsAt reports whether the list holds addr or user (when not "") in
// an entry that has not expired at now, addr read as Contains reads it.
// It is nil-safe and does not allocate.
func (l *List) ContainsAt(addr netip.Addr, user string, now time.Time) bool {
	if l == nil {
		return false
	}
	ns := now.UnixNano()
	if user != "" {
		if exp, ok := l.users[user]; ok && ns < exp {
			return true
		}
	}
	if !addr.IsValid() {
		return false
	}
	addr = l.nat.Of(addr)
	bits := l.bits6
	if addr.Is4() {
		bits = l.bits4
	}
	for _, b := range bits {
		p, err := addr.Prefix(b)
		if err != nil {
			continue
		}
		if exp, ok := l.prefixes[p]; ok && ns < exp {
			return true
		}
	}
	return false
}

// Len returns the number of distinct addresses and prefixes (as read, see
// NewNAT64) and user ids that apply or may apply (not pending, not
// removed; expiry is not compared).
func (l *List) Len() int {
	if l == nil {
		return 0
	}
	return len(l.prefixes) + len(l.users)
}

// Entries returns the entries as read, pending and removed ones included.
// The caller must not modify them.
func (l *List) Entries() []Entry {
	if l == nil {
		return nil
	}
	return l.entries
}

// A WideEntry is an entry that holds a network-specific NAT64 prefix the
// list was read through with fewer bits, such as 2001:db8::/32 for
// 2001:db8:64::/96: it is plain IPv6, and matches none of the IPv4 clients
// behind that translator, which the edge reads as their IPv4 addresses
// (clientip.NAT64). Read as IPv4 it would have to match every IPv4
// client, those that reach the edge without the translator too: a deny
// entry would refuse them, an allow entry exempt them. So it is read as
// written, and reported.
type WideEntry struct {
	Target string       // the entry's target, as written
	NAT64  netip.Prefix // the network-specific prefix it holds
}

// String says what the entry does not match, and how to list those
// clients.
func (w WideEntry) String() string {
	return w.Target + " holds identity.nat64_prefixes " + w.NAT64.String() +
		" but not the IPv4 clients behind that translator, which the edge reads as their IPv4 addresses;" +
		" list those by IPv4 address or prefix, or as " + w.NAT64.String() + " (every IPv4 client)"
}

// Wide returns the entries that apply or may apply (as Len counts them)
// and hold a network-specific prefix of the NAT64 the list was read
// through, one per target, in the order read: for each such prefix, at
// most one of each length shorter than it. The caller must not modify them.
func (l *List) Wide() []WideEntry {
	if l == nil {
		return nil
	}
	return l.wide
}

// Read returns when the list was read.
func (l *List) Read() time.Time {
	if l == nil {
		return time.Time{}
	}
	return l.read
}

// Targets returns the addresses and prefixes (an address as a prefix of
// its full length, masked, each as read: see NewNAT64) and the user ids
// that apply at now, each sorted: what another implementation of the list
// needs, such as the viewer-request function's compiled configuration.
func (l *List) Targets(now time.Time) (prefixes []netip.Prefix, users []string) {
	if l == nil {
		return nil, nil
	}
	at := now.UnixNano()
	for p, exp := range l.prefixes {
		if exp > at {
			prefixes = append(prefixes, p)
		}
	}
	for u, exp := range l.users {
		if exp > at {
			users = append(users, u)
		}
	}
	slices.SortFunc(prefixes, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
	slices.Sort(users)
	return prefixes, users
}
