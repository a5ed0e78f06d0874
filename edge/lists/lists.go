// Package lists holds the allow and deny lists: sets of addresses, CIDR
// prefixes and user ids, parsed from files and reloaded when they change.
//
// # File format
//
// One entry per line:
//
//	203.0.113.7          an IPv4 or IPv6 address
//	198.51.100.0/24      a CIDR prefix, IPv4 or IPv6, with no host bits set
//	user:alice           an authenticated user id
//	# a comment          '#' starts a comment, anywhere on a line
//
// Blank lines are ignored and surrounding whitespace is trimmed.
// IPv4-mapped IPv6 entries (::ffff:203.0.113.7) are stored as IPv4, since
// clients are. A bad line rejects the whole file, so that a typo never
// half-applies a list.
package lists

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
)

// Bounds on what Parse reads.
const (
	MaxLineLen = 4 << 10 // bytes in one line
	MaxEntries = 1 << 20 // entries in one list
	MaxUserLen = 256     // bytes in a user id, as identity believes them
	userPrefix = "user:"
	maxQuoted  = 64 // bytes of a bad line quoted in an error
)

// List is a parsed allow or deny list. It is immutable and safe for
// concurrent use. The zero value and the nil *List contain nothing.
type List struct {
	// prefixes holds every address and prefix, masked; an address is a
	// full-length prefix. Contains looks an address up once per prefix
	// length in use, so its cost depends on how many lengths a list uses
	// (at most 33 + 129), not on how many entries it has.
	prefixes map[netip.Prefix]struct{}
	bits4    []int // prefix lengths in use for IPv4, longest first
	bits6    []int // prefix lengths in use for IPv6, longest first
	users    map[string]struct{}
}

// Parse reads a list from r. name is the file name for error messages. A bad
// line is an error naming name:line, the text and what is allowed, and
// rejects the whole list.
func Parse(r io.Reader, name string) (*List, error) {
	l := &List{prefixes: map[netip.Prefix]struct{}{}, users: map[string]struct{}{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxLineLen)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Bytes()
		if lineNo == 1 {
			line = bytes.TrimPrefix(line, []byte("\uFEFF")) // a byte-order mark some editors write
		}
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		text := strings.TrimSpace(string(line))
		if text == "" {
			continue
		}
		if err := l.add(text); err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %v", name, lineNo, quote(text), err)
		}
		if l.Len() > MaxEntries {
			return nil, fmt.Errorf("%s:%d: more than %d entries", name, lineNo, MaxEntries)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: line longer than %d bytes", name, lineNo+1, MaxLineLen)
		}
		return nil, fmt.Errorf("read list %s: %w", name, err)
	}
	l.bits4 = lengths(l.prefixes, true)
	l.bits6 = lengths(l.prefixes, false)
	return l, nil
}

func quote(s string) string {
	if len(s) > maxQuoted {
		return fmt.Sprintf("%q...", s[:maxQuoted])
	}
	return fmt.Sprintf("%q", s)
}

var errEntry = errors.New("not an IP address, a CIDR or user:<id>")

// add parses one entry.
func (l *List) add(s string) error {
	if id, ok := strings.CutPrefix(s, userPrefix); ok {
		id = strings.TrimSpace(id)
		switch {
		case id == "":
			return errors.New("empty user id; want user:<id>")
		case len(id) > MaxUserLen:
			return fmt.Errorf("user id of %d bytes; want at most %d", len(id), MaxUserLen)
		}
		l.users[id] = struct{}{}
		return nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return errEntry
		}
		if p != p.Masked() {
			return fmt.Errorf("host bits set; want %v, or %v for the one address", p.Masked(), p.Addr())
		}
		// A masked prefix with a mapped address is at least /96: anything
		// shorter clears part of the ffff marker.
		if a := p.Addr(); a.Is4In6() {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		l.prefixes[p] = struct{}{}
		return nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return errEntry
	}
	if a.Zone() != "" {
		return errors.New("address with a zone; want an address without %zone")
	}
	a = a.Unmap()
	l.prefixes[netip.PrefixFrom(a, a.BitLen())] = struct{}{}
	return nil
}

// lengths returns the prefix lengths in use for one family, longest first.
func lengths(m map[netip.Prefix]struct{}, v4 bool) []int {
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
// prefix) or user (when not ""). It is nil-safe and does not allocate.
func (l *List) Contains(addr netip.Addr, user string) bool {
	if l == nil {
		return false
	}
	if user != "" {
		if _, ok := l.users[user]; ok {
			return true
		}
	}
	if !addr.IsValid() {
		return false
	}
	addr = addr.Unmap().WithZone("")
	bits := l.bits6
	if addr.Is4() {
		bits = l.bits4
	}
	for _, b := range bits {
		p, err := addr.Prefix(b)
		if err != nil {
			continue
		}
		if _, ok := l.prefixes[p]; ok {
			return true
		}
	}
	return false
}

// Len returns the number of distinct entries in the list.
func (l *List) Len() int {
	if l == nil {
		return 0
	}
	return len(l.prefixes) + len(l.users)
}

// Entries returns the list's addresses and prefixes (an address as a
// prefix of its full length, masked) and its user ids, each sorted: what
// another implementation of the list needs, such as the viewer-request
// function's compiled configuration.
func (l *List) Entries() (prefixes []netip.Prefix, users []string) {
	if l == nil {
		return nil, nil
	}
	for p := range l.prefixes {
		prefixes = append(prefixes, p)
	}
	for u := range l.users {
		users = append(users, u)
	}
	slices.SortFunc(prefixes, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
	slices.Sort(users)
	return prefixes, users
}
