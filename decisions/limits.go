package decisions

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/internal/canonpath"
)

// The times a decision can carry: int64 nanoseconds since 1970, the form
// every codec and every window computes with (years 1677 to 2262). A
// reader takes a time outside them, other than the zero time, for a
// corrupt record: UnixNano would wrap it into another century.
var (
	MinTime = time.Unix(0, math.MinInt64).UTC()
	MaxTime = time.Unix(0, math.MaxInt64).UTC()
)

// TimeInRange reports whether t is the zero time or within MinTime and
// MaxTime.
func TimeInRange(t time.Time) bool {
	return t.IsZero() || !t.Before(MinTime) && !t.After(MaxTime)
}

// The longest field values the edge writes, which readers believe; a
// record with a longer value is corrupt. They bound what one record can
// make a reader hold: the names are keys of every partial aggregate.
const (
	// MaxUserIDLen bounds user_id and plan: the edge believes no longer
	// identity (edge/identity.MaxUserLen).
	MaxUserIDLen = 256
	// MaxNameLen bounds tier, node, reason, response_error, list and
	// action: configuration names (the configuration refuses longer tier
	// and node names) and the edge's own words.
	MaxNameLen = 256
	// MaxRuleLen bounds rule: "tier:global" or "tier:/path/prefix", the
	// prefix a canonical path of at most canonpath.MaxLen (8 KiB).
	MaxRuleLen = MaxNameLen + 1 + canonpath.MaxLen
)

// MaxDropped bounds the count of a drops event (Decision.Dropped), which
// readers add up: an emitter reports at most this many decisions a
// report and carries the rest to the next one (Emitter), so a record
// claiming more, on any kind of event, is corrupt or forged. At a
// million drops a second an edge would need 12 days between reports to
// reach it, and sums of 2^24 reports at the cap still fit a uint64;
// sums of counts read back from stored aggregates saturate (internal/sat).
const MaxDropped = 1 << 40

// CheckUserID says why s is not a user id the edge believes, nil when it
// is one: an id is at most MaxUserIDLen bytes of valid UTF-8, holds no
// control character (C0, DEL, C1, or U+FFFD, the mark of a mangled
// encoding), and neither begins nor ends with white space. The edge
// counts a client whose claimed id is not one by its address
// (edge/identity), and the feedback lists hold exactly these ids
// (edge/lists): so every id the edge counts can be listed as it is, and
// no listed id stands for another (" bob" for "bob").
func CheckUserID(s string) error {
	switch {
	case s == "":
		return errors.New("empty user id")
	case len(s) > MaxUserIDLen:
		return FieldTooLong("user id", len(s), MaxUserIDLen)
	}
	// One pass, a byte at a time while the id is ASCII: the edge checks
	// every authenticated request's id.
	for i := 0; i < len(s); {
		r, n := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			if r, n = utf8.DecodeRuneInString(s[i:]); r == utf8.RuneError && n == 1 {
				return errors.New("user id is not valid UTF-8")
			}
		}
		if IsControl(r) {
			return fmt.Errorf("user id with a control character at byte %d; want printable text", i+1)
		}
		i += n
	}
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		return errors.New("user id with white space at its start or end")
	}
	return nil
}

// IsControl reports whether r is a control character (C0, DEL, C1) or
// U+FFFD, which readers take for a mangled encoding.
func IsControl(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError
}

// FieldCap is a string field of a decision and the longest value readers
// believe. Name is the field's name in every codec.
type FieldCap struct {
	Name string
	Max  int
	Of   func(*Decision) *string
}

// FieldCaps are the capped fields.
var FieldCaps = []FieldCap{
	{"user_id", MaxUserIDLen, func(d *Decision) *string { return &d.UserID }},
	{"plan", MaxUserIDLen, func(d *Decision) *string { return &d.Plan }},
	{"tier", MaxNameLen, func(d *Decision) *string { return &d.Tier }},
	{"rule", MaxRuleLen, func(d *Decision) *string { return &d.Rule }},
	{"node", MaxNameLen, func(d *Decision) *string { return &d.Node }},
	{"reason", MaxNameLen, func(d *Decision) *string { return &d.Reason }},
	{"response_error", MaxNameLen, func(d *Decision) *string { return &d.ResponseError }},
	{"list", MaxNameLen, func(d *Decision) *string { return &d.List }},
	{"action", MaxNameLen, func(d *Decision) *string { return &d.Action }},
}

// Clamp makes d a decision readers believe (Check), and reports whether
// it changed anything: a capped field longer than its cap is cut to it,
// on a character boundary; a time outside MinTime to MaxTime is moved to
// the nearer; a dropped count over MaxDropped is MaxDropped. A writer
// clamps what it is handed because readers refuse a whole record for one
// such decision, every other decision in it with it.
func (d *Decision) Clamp() bool {
	if d.fits() {
		return false
	}
	changed := false
	for _, f := range FieldCaps {
		v := f.Of(d)
		if FitsCap(*v, f.Max) {
			continue
		}
		// Cut as readers would see it: each byte that is not UTF-8 a
		// U+FFFD of three (a plan header of 100 such bytes is read as 300).
		if w := string(AppendValidUTF8(nil, *v)); len(w) > f.Max {
			*v, changed = Cut(w, f.Max), true
		}
	}
	switch {
	case d.Time.IsZero():
	case d.Time.Before(MinTime):
		d.Time, changed = MinTime, true
	case d.Time.After(MaxTime):
		d.Time, changed = MaxTime, true
	}
	if d.Dropped > MaxDropped {
		d.Dropped, changed = MaxDropped, true
	}
	return changed
}

// fits reports, without a call per field, whether Clamp would leave d as
// it is (TestFits holds it to FieldCaps): the emitter asks it of every
// decision it writes.
func (d *Decision) fits() bool {
	sec := d.Time.Unix()
	return FitsCap(d.UserID, MaxUserIDLen) && FitsCap(d.Plan, MaxUserIDLen) &&
		FitsCap(d.Tier, MaxNameLen) && FitsCap(d.Rule, MaxRuleLen) && FitsCap(d.Node, MaxNameLen) &&
		FitsCap(d.Reason, MaxNameLen) && FitsCap(d.ResponseError, MaxNameLen) &&
		FitsCap(d.List, MaxNameLen) && FitsCap(d.Action, MaxNameLen) &&
		d.Dropped <= MaxDropped && (minSec < sec && sec < maxSec || d.Time.IsZero())
}

// fitsCap reports whether s is at most max bytes as every codec writes
// it (WrittenLen), looking at its bytes only when it is over a third of
// max: the usual short value costs one comparison.
func FitsCap(s string, max int) bool {
	return len(s) <= max/3 || len(s) <= max && WrittenLen(s) <= max
}

// WrittenLen returns the length of s as every codec writes it, and so as
// every reader reads it: each byte that is not part of valid UTF-8
// becomes U+FFFD, three bytes (AppendValidUTF8).
func WrittenLen(s string) int {
	if utf8.ValidString(s) {
		return len(s)
	}
	n := len(s)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			n += 2
		}
		i += size
	}
	return n
}

// AppendValidUTF8 appends s to dst with each byte that is not part of
// valid UTF-8 replaced by U+FFFD, as every codec writes a string (JSON as
// encoding/json does, Arrow's utf8 type promising valid UTF-8), and
// returns the extended buffer. Valid UTF-8 is appended in one copy.
func AppendValidUTF8(dst []byte, s string) []byte {
	if utf8.ValidString(s) {
		return append(dst, s...)
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, "\uFFFD"...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return dst
}

// minSec and maxSec are the seconds of MinTime and MaxTime: a time between
// them, exclusive, is within them.
var minSec, maxSec = MinTime.Unix(), MaxTime.Unix()

// Cut returns s cut to at most n bytes, on a character boundary (and
// without the bytes of s[:n] that are not UTF-8): how a field past its cap
// is made one readers take.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// FieldTooLong is the error of a field longer than its cap.
func FieldTooLong(name string, n, max int) error {
	return fmt.Errorf("%s of %d bytes, at most %d", name, n, max)
}

// Check reports the first problem that makes d a corrupt record for a
// reader: a time out of range, a field longer than its cap, or a dropped
// count over MaxDropped.
func (d *Decision) Check() error {
	if !TimeInRange(d.Time) {
		return fmt.Errorf("time %s is outside %s to %s, the range of int64 nanoseconds since 1970",
			d.Time.Format(time.RFC3339Nano), MinTime.Format(time.RFC3339Nano), MaxTime.Format(time.RFC3339Nano))
	}
	for _, f := range FieldCaps {
		if v := *f.Of(d); !FitsCap(v, f.Max) {
			return FieldTooLong(f.Name, WrittenLen(v), f.Max)
		}
	}
	if d.Dropped > MaxDropped {
		return DroppedTooMany(d.Dropped)
	}
	return nil
}

// DroppedTooMany is the error of a dropped count over MaxDropped.
func DroppedTooMany(n uint64) error {
	return fmt.Errorf("dropped %d, at most %d", n, uint64(MaxDropped))
}
