// Package limitheaders names the rate-limit headers the edge sets on an
// answer that counted against a limit, in their canonical form, so that
// the edge that sets them (edge.RateLimitHeaders) and the code that reads
// them from outside the edge (the demo's traffic, which may not import
// the edge) spell each name in one place.
package limitheaders

// The rate-limit headers, canonical (as http.CanonicalHeaderKey writes
// them), in the order of edge.AppendRateLimitValues's values.
const (
	Limit     = "X-Ratelimit-Limit"
	Remaining = "X-Ratelimit-Remaining"
	Reset     = "X-Ratelimit-Reset"
	Policy    = "Ratelimit-Policy"
	RateLimit = "Ratelimit"
)
