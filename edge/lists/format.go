package lists

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/internal/clientip"
)

// Attribute keys of a line, in the order AppendLine writes them.
const (
	attrExpires = "expires"
	attrAdded   = "added"
	attrBy      = "by"
	attrReason  = "reason"
	attrPending = "pending"
	attrRemoved = "removed"
)

var attrKeys = []string{attrExpires, attrAdded, attrBy, attrReason, attrPending, attrRemoved}

// Bounds on attribute values.
const (
	MaxReasonLen = 512 // bytes in a reason
	MaxByLen     = 128 // bytes in who wrote an entry
)

// ParseEntries reads the entries of list from r, in the file format (see
// the package doc). name is the file name for error messages: a bad line is
// an error naming name:line, the text and what is allowed, and rejects the
// whole file, so that a typo never half-applies a list.
func ParseEntries(r io.Reader, name, list string) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxLineLen)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Bytes()
		if lineNo == 1 {
			line = bytes.TrimPrefix(line, []byte("\uFEFF")) // a byte-order mark some editors write
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		e, ok, err := parseLine(string(line))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %v", name, lineNo, quote(strings.TrimSpace(uncomment(string(line)))), err)
		}
		if !ok {
			continue
		}
		if len(out) >= MaxEntries {
			return nil, fmt.Errorf("%s:%d: more than %d entries", name, lineNo, MaxEntries)
		}
		e.List = list
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: line longer than %d bytes", name, lineNo+1, MaxLineLen)
		}
		return nil, fmt.Errorf("read list %s: %w", name, err)
	}
	return out, nil
}

// uncomment cuts a line at its first '#', for quoting a bad line.
func uncomment(s string) string {
	if i := strings.IndexByte(s, '#'); i >= 0 && !strings.Contains(s[:i], `"`) {
		return s[:i]
	}
	return s
}

// parseLine parses one line; ok is false for a blank or comment line.
func parseLine(s string) (e Entry, ok bool, err error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return e, false, fmt.Errorf("control character %q at byte %d; want printable text (quote values with \"...\")", c, i+1)
		}
	}
	if !utf8.ValidString(s) {
		return e, false, errors.New("not valid UTF-8")
	}
	tok := tokenizer{s: s}
	// The first field is the target, '=' or not: user ids may hold one.
	target, _, err := tok.next()
	if err != nil || target == nil {
		return e, false, err
	}
	t := *target
	seen := map[string]bool{}
	for {
		kv, isAttr, err := tok.next()
		if err != nil {
			return e, false, err
		}
		if kv == nil {
			break
		}
		if !isAttr {
			// The old format allowed "user: alice"; anything else is a
			// second target, which is never read as one.
			if t == userPrefix && len(seen) == 0 && e.Target == "" {
				t += *kv
				continue
			}
			return e, false, fmt.Errorf("%q is not key=value; want one target a line, then key=value attributes (%s)", *kv, strings.Join(attrKeys, ", "))
		}
		k, v, _ := strings.Cut(*kv, "=")
		if seen[k] {
			return e, false, fmt.Errorf("attribute %s given twice", k)
		}
		seen[k] = true
		if err := setAttr(&e, k, v); err != nil {
			return e, false, err
		}
	}
	if e.Target, err = NormalizeTarget(t); err != nil {
		return e, false, err
	}
	return e, true, nil
}

func setAttr(e *Entry, k, v string) error {
	var err error
	switch k {
	case attrExpires:
		e.Expires, err = parseTime(k, v)
	case attrAdded:
		e.Added, err = parseTime(k, v)
	case attrRemoved:
		e.Removed, err = parseTime(k, v)
	case attrBy:
		e.By, err = checkText(k, v, MaxByLen)
	case attrReason:
		e.Reason, err = checkText(k, v, MaxReasonLen)
	case attrPending:
		e.Pending, err = strconv.ParseBool(v)
		if err != nil {
			err = fmt.Errorf("pending=%q; want true or false", v)
		}
	default:
		err = fmt.Errorf("unknown attribute %q; want one of %s", k, strings.Join(attrKeys, ", "))
	}
	return err
}

func parseTime(k, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s=%q; want an RFC 3339 time such as 2026-12-01T18:00:00Z", k, v)
	}
	return t.UTC(), nil
}

// checkText checks a free-text attribute: bounded and printable, so that
// it can neither break a line nor a terminal.
func checkText(k, v string, max int) (string, error) {
	if len(v) > max {
		return "", fmt.Errorf("%s of %d bytes; want at most %d", k, len(v), max)
	}
	if i := strings.IndexFunc(v, decisions.IsControl); i >= 0 {
		return "", fmt.Errorf("%s with a control character at byte %d; want printable text", k, i+1)
	}
	if !utf8.ValidString(v) {
		return "", fmt.Errorf("%s is not valid UTF-8", k)
	}
	return v, nil
}

// tokenizer splits a line into whitespace-separated fields, each bare or a
// Go double-quoted string, key="quoted" included; '#' outside quotes
// starts a comment.
type tokenizer struct {
	s string
	i int
}

// next returns the next field unquoted (nil at the end of the line) and
// whether it is key=value.
func (t *tokenizer) next() (*string, bool, error) {
	for t.i < len(t.s) && (t.s[t.i] == ' ' || t.s[t.i] == '\t') {
		t.i++
	}
	if t.i == len(t.s) || t.s[t.i] == '#' {
		return nil, false, nil
	}
	start := t.i
	var b strings.Builder
	isAttr := false
	for t.i < len(t.s) {
		c := t.s[t.i]
		switch {
		case c == ' ' || c == '\t' || c == '#':
			out := b.String()
			return &out, isAttr, nil
		case c == '"':
			q, err := strconv.QuotedPrefix(t.s[t.i:])
			if err != nil {
				return nil, false, fmt.Errorf("unterminated or bad quoted string at byte %d", t.i+1)
			}
			u, _ := strconv.Unquote(q)
			b.WriteString(u)
			t.i += len(q)
			if t.i < len(t.s) && t.s[t.i] != ' ' && t.s[t.i] != '\t' && t.s[t.i] != '#' {
				return nil, false, fmt.Errorf("text right after a quoted string at byte %d; want a space", t.i+1)
			}
			continue
		case c == '=' && !isAttr && t.i > start && !strings.ContainsRune(t.s[start:t.i], '"'):
			isAttr = true
		}
		b.WriteByte(c)
		t.i++
	}
	out := b.String()
	return &out, isAttr, nil
}

var errEntry = errors.New("not an IP address, a CIDR or user:<id>")

// NormalizeTarget checks a target and returns its canonical form: an
// address without zone and unmapped from IPv4-mapped IPv6, a masked CIDR
// prefix (host bits are an error; one of a single address, /32 or /128,
// is that address), or user:<id> with an id the edge
// believes (decisions.CheckUserID: printable, without white space at
// either end, at most MaxUserLen bytes). Two targets that match the same
// clients normalize alike, which is what writers and readers key on. An
// id is not trimmed: "user: bob" would match no client the edge counts,
// and trimming it would list another ("bob"); white space is trimmed
// around addresses and prefixes, and before "user:".
func NormalizeTarget(s string) (string, error) {
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	if id, ok := strings.CutPrefix(s, userPrefix); ok {
		if id == "" {
			return "", errors.New("empty user id; want user:<id>")
		}
		if err := decisions.CheckUserID(id); err != nil {
			return "", err
		}
		return userPrefix + id, nil
	}
	s = strings.TrimRightFunc(s, unicode.IsSpace)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return "", errEntry
		}
		if p != p.Masked() {
			return "", fmt.Errorf("host bits set; want %v, or %v for the one address", p.Masked(), p.Addr())
		}
		if p, err = clientip.Prefix(p); err != nil {
			return "", err
		}
		// 203.0.113.7/32 matches the clients 203.0.113.7 matches, so it
		// is keyed as that: a second add in the other spelling replaces
		// the first, and remove finds it.
		return writeTarget(p), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "", errEntry
	}
	if a.Zone() != "" {
		return "", errors.New("address with a zone; want an address without %zone")
	}
	return clientip.Of(a).String(), nil
}

// AppendLine appends e as one line of the file format, newline included.
// Every field that could break the line (spaces, quotes, '#', control
// characters) is quoted, so what is written reads back as the same one
// entry. The list name is not written: a file holds one list.
func AppendLine(dst []byte, e *Entry) []byte {
	dst = appendField(dst, e.Target)
	attr := func(k, v string) {
		dst = append(dst, ' ')
		dst = append(dst, k...)
		dst = append(dst, '=')
		dst = appendField(dst, v)
	}
	if !e.Expires.IsZero() {
		attr(attrExpires, e.Expires.UTC().Format(time.RFC3339))
	}
	if !e.Added.IsZero() {
		attr(attrAdded, e.Added.UTC().Format(time.RFC3339))
	}
	if e.By != "" {
		attr(attrBy, e.By)
	}
	if e.Reason != "" {
		attr(attrReason, e.Reason)
	}
	if e.Pending {
		attr(attrPending, "true")
	}
	if !e.Removed.IsZero() {
		attr(attrRemoved, e.Removed.UTC().Format(time.RFC3339))
	}
	return append(dst, '\n')
}

func appendField(dst []byte, s string) []byte {
	if s == "" || strings.ContainsFunc(s, needsQuote) {
		return strconv.AppendQuote(dst, s)
	}
	return append(dst, s...)
}

func needsQuote(r rune) bool {
	return r <= ' ' || r == '"' || r == '#' || r == '=' || r == '\\' || r >= 0x7f
}

// Validate checks an entry as a writer is about to store it: a known list,
// a valid target (normalized in place), bounded printable text, and an
// expiry after Added.
func (e *Entry) Validate() error {
	if !slices.Contains(Names, e.List) {
		return fmt.Errorf("list %q: want one of %s", e.List, strings.Join(Names, ", "))
	}
	t, err := NormalizeTarget(e.Target)
	if err != nil {
		return fmt.Errorf("target %q: %v", e.Target, err)
	}
	e.Target = t
	if _, err := checkText(attrBy, e.By, MaxByLen); err != nil {
		return err
	}
	if _, err := checkText(attrReason, e.Reason, MaxReasonLen); err != nil {
		return err
	}
	for _, t := range []time.Time{e.Expires, e.Added} {
		if !t.IsZero() && (t.Unix() < 0 || t.Unix() > maxUnix) {
			return fmt.Errorf("time %s: want one from 1970 to 9999", t.Format(time.RFC3339))
		}
	}
	if !e.Expires.IsZero() && !e.Added.IsZero() && !e.Expires.After(e.Added) {
		return fmt.Errorf("expires %s is not after added %s", e.Expires.Format(time.RFC3339), e.Added.Format(time.RFC3339))
	}
	return nil
}
