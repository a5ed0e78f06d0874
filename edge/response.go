package edge

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/internal/canonpath"
	"github.com/ratewarden/ratewarden/internal/jsonstr"
	"github.com/ratewarden/ratewarden/internal/limitheaders"
)

// SetHeaders sets the rate-limit headers of v on h: the de-facto
// X-RateLimit-Limit, -Remaining and -Reset (unix seconds), and the IETF
// httpapi draft's RateLimit-Policy (every rule the request counted against)
// and RateLimit (the deciding rule). Decisions that counted nothing (lists,
// missing identity) set none.
func SetHeaders(h http.Header, v *Verdict) {
	p := &v.Policies[0]
	if p.Name == "" {
		return
	}
	// One buffer for the five values and one array for their slices: two
	// allocations instead of ten on every response.
	buf, ends := AppendRateLimitValues(make([]byte, 0, 160+2*len(p.Name)+len(v.Policies[1].Name)), v)
	all := string(buf)
	vals := new([5]string)
	start := 0
	for i, end := range ends {
		vals[i] = all[start:end]
		start = end
	}
	// The keys are canonical already.
	h[RateLimitHeaders[0]] = vals[0:1:1]
	h[RateLimitHeaders[1]] = vals[1:2:2]
	h[RateLimitHeaders[2]] = vals[2:3:3]
	h[RateLimitHeaders[3]] = vals[3:4:4]
	h[RateLimitHeaders[4]] = vals[4:5:5]
}

// RateLimitHeaders are the canonical keys of the rate-limit headers, in
// the order of AppendRateLimitValues's values.
var RateLimitHeaders = [5]string{limitheaders.Limit, limitheaders.Remaining, limitheaders.Reset, limitheaders.Policy, limitheaders.RateLimit}

// AppendRateLimitValues appends the values of v's rate-limit headers
// (RateLimitHeaders) to b one after the other, and returns where each
// ends: value i is b[ends[i-1]:ends[i]], value 0 starting at len(b) on
// entry; the ends are indices in the returned slice. A verdict that
// counted nothing (v.Policies[0].Name empty) has no
// rate-limit headers: the caller checks that first. It is SetHeaders
// without the http.Header, for servers that keep headers as bytes.
func AppendRateLimitValues(b []byte, v *Verdict) (_ []byte, ends [5]int) {
	p := &v.Policies[0]
	b = strconv.AppendInt(b, p.Limit, 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, p.Remaining, 10)
	ends[1] = len(b)
	b = strconv.AppendInt(b, v.Time.Add(p.Reset).Add(time.Second-1).Unix(), 10)
	ends[2] = len(b)
	for i := range v.Policies {
		q := &v.Policies[i]
		if q.Name == "" {
			continue
		}
		if len(b) > ends[2] {
			b = append(b, ", "...)
		}
		b = appendQuoted(b, q.Name)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, q.Limit, 10)
		if q.Window > 0 {
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, ceilSeconds(q.Window), 10)
		}
	}
	ends[3] = len(b)
	b = appendQuoted(b, p.Name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, p.Remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, ceilSeconds(p.Reset), 10)
	ends[4] = len(b)
	return b, ends
}

// appendQuoted appends name as a structured-field string (RFC 8941), which
// is also an HTTP quoted-string (RFC 9110): printable ASCII, with quote and
// backslash escaped, anything else written as "_".
func appendQuoted(b []byte, name string) []byte {
	b = append(b, '"')
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '_')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// RetryAfterSeconds is the Retry-After of a refused verdict, in whole
// seconds, at least one.
func (v *Verdict) RetryAfterSeconds() int64 { return max(ceilSeconds(v.RetryAfter), 1) }

// ResetSeconds is the time until p resets, in whole seconds rounded up.
func (p *Policy) ResetSeconds() int64 { return ceilSeconds(p.Reset) }

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Response is what the edge answers instead of forwarding a request.
type Response struct {
	Status   int
	Location string // for challenges
	Body     []byte // JSON; empty for challenges
	// RetryAfter is the Retry-After header's value, whole seconds as the
	// header has them; 0 for none: a refusal that waiting does not lift.
	RetryAfter int64
}

// seconds spells n seconds: "1 second", "30 seconds".
func seconds(n int64) string {
	if n == 1 {
		return "1 second"
	}
	return strconv.FormatInt(n, 10) + " seconds"
}

// Refusal returns the response for a refused verdict (block, local limit,
// challenge, deny list, fail closed, rejected path), or ok false for a verdict that
// passes. challengePage and param build the challenge redirect.
func Refusal(v *Verdict, challengePage, param string) (resp Response, ok bool) {
	retry := v.RetryAfterSeconds()
	switch v.Outcome {
	case decisions.Block, decisions.LocalLimit:
		return Response{Status: http.StatusTooManyRequests, Body: errorBody("rate_limit_exceeded",
			"Too many requests. Try again in "+seconds(retry)+".", retry), RetryAfter: retry}, true
	case decisions.Challenge:
		sep := "?"
		if strings.Contains(challengePage, "?") {
			sep = "&"
		}
		return Response{Status: http.StatusFound, Location: challengePage + sep + param + "=" + url.QueryEscape(v.uri)}, true
	case decisions.DenyListed:
		return Response{Status: http.StatusForbidden, Body: errorBody("forbidden", "Access denied.", 0)}, true
	case decisions.FailClosed:
		if v.Reason == ReasonNoClientAddress {
			// The request will never have an address: retrying cannot help.
			return Response{Status: http.StatusServiceUnavailable, Body: errorBody("no_client_address",
				"Service unavailable: the request has no client address, which this path needs. Retrying will not help.", 0)}, true
		}
		return Response{Status: http.StatusServiceUnavailable, Body: errorBody("service_unavailable",
			"Service temporarily unavailable. Try again in "+seconds(retry)+".", retry), RetryAfter: retry}, true
	case decisions.Rejected:
		if errors.Is(v.pathErr, canonpath.ErrTooLong) {
			return Response{Status: http.StatusRequestURITooLong, Body: errorBody("uri_too_long", "The request path is too long.", 0)}, true
		}
		return Response{Status: http.StatusBadRequest, Body: errorBody("bad_request", "Bad request path: "+v.Reason+".", 0)}, true
	}
	return Response{}, false
}

func errorBody(code, msg string, retry int64) []byte {
	b := make([]byte, 0, 128)
	b = append(b, `{"error":`...)
	b = jsonstr.Append(b, code)
	b = append(b, `,"message":`...)
	b = jsonstr.Append(b, msg)
	if retry > 0 {
		b = append(b, `,"retry_after":`...)
		b = strconv.AppendInt(b, retry, 10)
	}
	return append(b, '}', '\n')
}

// Write writes resp with v's headers to w.
func (resp *Response) Write(w http.ResponseWriter, v *Verdict) {
	h := w.Header()
	SetHeaders(h, v)
	resp.EachHeader(h.Set)
	if resp.Location != "" {
		w.WriteHeader(resp.Status)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
}

// EachHeader calls set with each header of resp but the rate-limit headers
// (SetHeaders) and Content-Length: Retry-After, Location, Content-Type
// and Cache-Control. It is Write's, for servers other than net/http's.
func (resp *Response) EachHeader(set func(key, value string)) {
	if resp.RetryAfter > 0 {
		set("Retry-After", strconv.FormatInt(resp.RetryAfter, 10))
	}
	if resp.Location != "" {
		set("Location", resp.Location)
		set("Cache-Control", "no-store")
		return
	}
	set("Content-Type", "application/json")
	set("Cache-Control", "no-store")
}
