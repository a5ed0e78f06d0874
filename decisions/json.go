package decisions

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/jsonstr"
)

// AppendJSON appends d to dst as one JSON object (no trailing newline) and
// returns the extended buffer. Times are RFC 3339 with nanoseconds in UTC;
// durations are milliseconds (window, reset, ttl) or microseconds (store
// and upstream latency), named with their unit, with a decimal fraction
// down to the nanosecond when they are not whole, so the form is lossless.
// Empty strings and zero numbers are kept, so every line of a kind has the
// same fields; the fields of one kind only (the response of a decision,
// the list of a feedback event) are written for that kind.
func AppendJSON(dst []byte, d *Decision) []byte {
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, Version, 10)
	dst = appendField(dst, `,"kind":`, d.Kind.String())
	dst = append(dst, `,"time":"`...)
	dst = d.Time.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, '"')
	dst = appendField(dst, `,"request_id":`, d.RequestID)
	dst = appendField(dst, `,"node":`, d.Node)
	dst = append(dst, `,"client_ip":"`...)
	if d.ClientIP.IsValid() {
		dst = d.ClientIP.AppendTo(dst)
	}
	dst = append(dst, '"')
	dst = appendField(dst, `,"user_id":`, d.UserID)
	dst = appendField(dst, `,"plan":`, d.Plan)
	dst = appendField(dst, `,"tier":`, d.Tier)
	dst = appendField(dst, `,"identity_source":`, d.IdentitySource)
	dst = appendField(dst, `,"method":`, d.Method)
	dst = appendField(dst, `,"host":`, d.Host)
	dst = appendField(dst, `,"path":`, d.Path)
	dst = appendField(dst, `,"rule":`, d.Rule)
	dst = appendField(dst, `,"algorithm":`, d.Algorithm)
	dst = appendInt(dst, "limit", d.Limit)
	dst = appendDuration(dst, "window_ms", d.Window, time.Millisecond)
	dst = appendInt(dst, "count", d.Count)
	dst = appendInt(dst, "remaining", d.Remaining)
	dst = appendDuration(dst, "reset_ms", d.Reset, time.Millisecond)
	dst = appendField(dst, `,"outcome":`, d.Outcome.Name())
	dst = appendField(dst, `,"reason":`, d.Reason)
	dst = appendDuration(dst, "store_latency_us", d.StoreLatency, time.Microsecond)
	dst = appendField(dst, `,"privacy":`, d.Privacy)
	if d.Kind == KindDecision {
		dst = appendInt(dst, "status", int64(d.Status))
		dst = appendDuration(dst, "upstream_latency_us", d.UpstreamLatency, time.Microsecond)
		dst = appendField(dst, `,"response_error":`, d.ResponseError)
	}
	if d.Kind == KindFeedback {
		dst = appendField(dst, `,"list":`, d.List)
		dst = appendField(dst, `,"action":`, d.Action)
		dst = appendField(dst, `,"target":`, d.Target)
		dst = appendDuration(dst, "ttl_ms", d.TTL, time.Millisecond)
	}
	if d.Kind == KindDrops {
		dst = append(dst, `,"dropped":`...)
		dst = strconv.AppendUint(dst, d.Dropped, 10)
	}
	return append(dst, '}')
}

func appendInt(dst []byte, name string, v int64) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	return strconv.AppendInt(dst, v, 10)
}

// appendDuration writes d in units of unit: the whole part, and a decimal
// fraction (trailing zeros trimmed) when d is not a whole number of units.
func appendDuration(dst []byte, name string, d, unit time.Duration) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	if d < 0 {
		dst = append(dst, '-')
		d = -d // a duration of math.MinInt64 is not one this schema carries
	}
	dst = strconv.AppendInt(dst, int64(d/unit), 10)
	frac := int64(d % unit)
	if frac == 0 {
		return dst
	}
	digits := len(strconv.FormatInt(int64(unit), 10)) - 1 // 6 for ms, 3 for µs
	var buf [12]byte
	b := strconv.AppendInt(buf[:0], frac, 10)
	dst = append(dst, '.')
	for range digits - len(b) {
		dst = append(dst, '0')
	}
	for len(b) > 0 && b[len(b)-1] == '0' {
		b = b[:len(b)-1]
	}
	return append(dst, b...)
}

// parseDuration reads a number written by appendDuration exactly.
func parseDuration(n json.Number, unit time.Duration) (time.Duration, error) {
	s := string(n)
	if s == "" {
		return 0, nil
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	whole, frac, _ := strings.Cut(s, ".")
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("duration %q: %w", n, err)
	}
	digits := len(strconv.FormatInt(int64(unit), 10)) - 1
	if len(frac) > digits {
		return 0, fmt.Errorf("duration %q: finer than a nanosecond", n)
	}
	var f int64
	if frac != "" {
		if f, err = strconv.ParseInt(frac+strings.Repeat("0", digits-len(frac)), 10, 64); err != nil {
			return 0, fmt.Errorf("duration %q: %w", n, err)
		}
	}
	if w > (math.MaxInt64-f)/int64(unit) {
		return 0, fmt.Errorf("duration %q: over the %v a duration holds", n, time.Duration(math.MaxInt64))
	}
	d := time.Duration(w)*unit + time.Duration(f)
	if neg {
		d = -d
	}
	return d, nil
}

// appendField appends key, a member's name with its punctuation
// (`,"name":`), and v as a JSON string. One append of the key keeps it
// small enough to inline.
func appendField(dst []byte, key, v string) []byte {
	dst = append(dst, key...)
	return jsonstr.Append(dst, v)
}

// wire is the JSON form of a Decision, for decoding.
type wire struct {
	V              int         `json:"v"`
	Kind           string      `json:"kind"`
	Time           string      `json:"time"`
	RequestID      string      `json:"request_id"`
	Node           string      `json:"node"`
	ClientIP       string      `json:"client_ip"`
	UserID         string      `json:"user_id"`
	Plan           string      `json:"plan"`
	Tier           string      `json:"tier"`
	IdentitySource string      `json:"identity_source"`
	Method         string      `json:"method"`
	Host           string      `json:"host"`
	Path           string      `json:"path"`
	Rule           string      `json:"rule"`
	Algorithm      string      `json:"algorithm"`
	Limit          int64       `json:"limit"`
	WindowMS       json.Number `json:"window_ms"`
	Count          int64       `json:"count"`
	Remaining      int64       `json:"remaining"`
	ResetMS        json.Number `json:"reset_ms"`
	Outcome        string      `json:"outcome"`
	Reason         string      `json:"reason"`
	StoreLatencyUS json.Number `json:"store_latency_us"`
	Privacy        string      `json:"privacy"`
	Status         int         `json:"status"`
	UpstreamLatUS  json.Number `json:"upstream_latency_us"`
	ResponseError  string      `json:"response_error"`
	List           string      `json:"list"`
	Action         string      `json:"action"`
	Target         string      `json:"target"`
	TTLMS          json.Number `json:"ttl_ms"`
	Dropped        uint64      `json:"dropped"`
}

// ParseJSON decodes one decision written by AppendJSON. Unknown fields are
// ignored (they come from newer writers); a version newer than Version is
// decoded as far as the known fields go and reported by the returned
// version. A decision that fails Check (a time out of range, a field
// longer than the edge writes) is an error.
func ParseJSON(line []byte) (d Decision, version int, err error) {
	var w wire
	if err := json.Unmarshal(line, &w); err != nil {
		return d, 0, fmt.Errorf("parse decision: %w", err)
	}
	if w.V < 1 {
		return d, w.V, fmt.Errorf("parse decision: missing or invalid schema version %d", w.V)
	}
	t, err := time.Parse(time.RFC3339Nano, w.Time)
	if err != nil {
		return d, w.V, fmt.Errorf("parse decision: time: %w", err)
	}
	var ip netip.Addr
	if w.ClientIP != "" {
		if ip, err = netip.ParseAddr(w.ClientIP); err != nil {
			return d, w.V, fmt.Errorf("parse decision: client_ip: %w", err)
		}
	}
	kind := KindDecision
	if w.Kind != "" {
		k, ok := ParseKind(w.Kind)
		if !ok {
			return d, w.V, fmt.Errorf("parse decision: unknown kind %q", w.Kind)
		}
		kind = k
	}
	var o Outcome
	if kind == KindDecision || w.Outcome != "" {
		var ok bool
		if o, ok = ParseOutcome(w.Outcome); !ok {
			return d, w.V, fmt.Errorf("parse decision: unknown outcome %q", w.Outcome)
		}
	}
	var durs [5]time.Duration
	for i, f := range []struct {
		n    json.Number
		unit time.Duration
	}{{w.WindowMS, time.Millisecond}, {w.ResetMS, time.Millisecond}, {w.StoreLatencyUS, time.Microsecond}, {w.TTLMS, time.Millisecond}, {w.UpstreamLatUS, time.Microsecond}} {
		if durs[i], err = parseDuration(f.n, f.unit); err != nil {
			return d, w.V, fmt.Errorf("parse decision: %w", err)
		}
	}
	d = Decision{
		Kind: kind, Privacy: w.Privacy, List: w.List, Action: w.Action, Target: w.Target,
		TTL: durs[3], Dropped: w.Dropped,
		Time: t, RequestID: w.RequestID, Node: w.Node, ClientIP: ip, UserID: w.UserID, Plan: w.Plan,
		Tier: w.Tier, IdentitySource: w.IdentitySource, Method: w.Method, Host: w.Host, Path: w.Path,
		Rule: w.Rule, Algorithm: w.Algorithm, Limit: w.Limit, Window: durs[0],
		Count: w.Count, Remaining: w.Remaining, Reset: durs[1],
		Outcome: o, Reason: w.Reason, StoreLatency: durs[2],
		Status: w.Status, UpstreamLatency: durs[4], ResponseError: w.ResponseError,
	}
	if err := d.Check(); err != nil {
		return Decision{}, w.V, fmt.Errorf("parse decision: %w", err)
	}
	return d, w.V, nil
}
