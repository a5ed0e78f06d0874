package edge

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestRefusalSaysSeconds: a refusal's message says when to try again in
// the seconds its Retry-After gives, "1 second" for one.
func TestRefusalSaysSeconds(t *testing.T) {
	for _, c := range []struct {
		outcome decisions.Outcome
		after   time.Duration
		want    string
	}{
		{decisions.Block, 300 * time.Millisecond, "Too many requests. Try again in 1 second."},
		{decisions.LocalLimit, 2 * time.Second, "Too many requests. Try again in 2 seconds."},
		{decisions.FailClosed, time.Second, "Service temporarily unavailable. Try again in 1 second."},
		{decisions.FailClosed, 10 * time.Second, "Service temporarily unavailable. Try again in 10 seconds."},
	} {
		v := &Verdict{Decision: decisions.Decision{Outcome: c.outcome}, RetryAfter: c.after}
		resp, ok := Refusal(v, "/challenge", "return")
		var body struct{ Message string }
		if err := json.Unmarshal(resp.Body, &body); !ok || err != nil || body.Message != c.want {
			t.Errorf("%v after %v: %q (%v, %v), want %q", c.outcome, c.after, body.Message, ok, err, c.want)
		}
	}
}
