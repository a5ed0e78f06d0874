package main

import (
	"fmt"
	"strconv"
	"strings"
)

// position is a source position as an EMF document's rw_range names it:
// an offset or event number ("12" in `ratewarden aggregate`'s "12-40"), or
// a Kinesis sequence number, alone (a Lambda commit group's "seq-seq", as
// earlier versions keyed a group) or with the index of the event within
// its record (their parts' "seq_sub-seq_sub"). The Lambda now keys an
// output by its window's first event alone, "seq_sub": not a range, since
// a retry may end elsewhere, so parseRange refuses it (this benchmark
// measures the aggregate and serve commands). Sequence numbers are
// decimal strings of up to 128 digits, beyond uint64, so seq keeps the
// digits, without leading zeros, and compares by length, then bytes.
type position struct {
	seq string
	sub int64 // the event within the record; -1: the whole record
}

// offset is the position of event or offset n of the aggregate command's
// sources.
func offset(n uint64) position { return position{seq: strconv.FormatUint(n, 10), sub: -1} }

// maxSeqDigits is the longest Kinesis sequence number.
const maxSeqDigits = 128

// parseRange reads an rw_range property: "from-to" with each end an
// offset or sequence number, or "seq_sub", both ends of one form, from
// at or before to. It fails on any other form rather than guess.
func parseRange(s string) (from, to position, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return from, to, fmt.Errorf("range %q: want from-to", s)
	}
	if from, err = parsePosition(a); err != nil {
		return from, to, fmt.Errorf("range %q: from: %w", s, err)
	}
	if to, err = parsePosition(b); err != nil {
		return from, to, fmt.Errorf("range %q: to: %w", s, err)
	}
	if (from.sub < 0) != (to.sub < 0) {
		return from, to, fmt.Errorf("range %q: one end has an event index (seq_sub) and the other not", s)
	}
	if to.before(from) {
		return from, to, fmt.Errorf("range %q: ends before it starts", s)
	}
	return from, to, nil
}

// parsePosition reads one end of a range: digits, or digits_digits.
func parsePosition(s string) (position, error) {
	seq, sub, hasSub := strings.Cut(s, "_")
	if err := digits(seq, maxSeqDigits); err != nil {
		return position{}, err
	}
	p := position{seq: strings.TrimLeft(seq, "0"), sub: -1}
	if p.seq == "" {
		p.seq = "0"
	}
	if !hasSub {
		return p, nil
	}
	if err := digits(sub, 19); err != nil {
		return position{}, fmt.Errorf("event index: %w", err)
	}
	n, err := strconv.ParseInt(sub, 10, 64)
	if err != nil {
		return position{}, fmt.Errorf("event index %q: %w", sub, err)
	}
	p.sub = n
	return p, nil
}

// digits checks that s is 1 to max decimal digits.
func digits(s string, max int) error {
	if s == "" || len(s) > max {
		return fmt.Errorf("%q: want 1 to %d decimal digits", s, max)
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return fmt.Errorf("%q: want 1 to %d decimal digits", s, max)
		}
	}
	return nil
}

// cmpSeq orders two sequence numbers without leading zeros.
func cmpSeq(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// before reports whether p comes before q, both of one form.
func (p position) before(q position) bool {
	if c := cmpSeq(p.seq, q.seq); c != 0 {
		return c < 0
	}
	return p.sub < q.sub
}

// holds reports whether a range ending at to holds p: p is at or before
// it, where an end naming a whole record holds all of its events.
func (to position) holds(p position) bool {
	if c := cmpSeq(p.seq, to.seq); c != 0 {
		return c < 0
	}
	return to.sub < 0 || p.sub <= to.sub
}
