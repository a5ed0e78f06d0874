package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/internal/visible"
)

// Loop prints a line for each alert and feedback action as they are
// recorded, the identities in them escaped (visible.Escape: they are the
// client's choice, and a terminal obeys what it is sent), and keeps what
// the demo checks at the end: the scraper's heavy_hitter alert, the
// policy's entry putting it on the challenge list, the credential-stuffing
// alert. It is an assemble.AlertWatcher and is safe for concurrent use.
type Loop struct {
	W   io.Writer
	Now func() time.Time // the story clock
	// Listed, if set, is called once, when the scraper is put on the
	// challenge list, with the time.
	Listed func(time.Time)

	mu sync.Mutex
	st LoopState
}

// LoopState is what the loop saw of the story.
type LoopState struct {
	Alerted     time.Time // when the scraper's heavy_hitter alert was recorded
	AlertWindow time.Time // the end of the window that raised it
	Listed      time.Time // when the policy put the scraper on the challenge list
	ListedBy    string    // the entry's writer: policy:<name>
	Stuffing    time.Time // when the credential_stuffing alert was recorded
	Alerts      int       // alerts raised, of any type
	Applied     int       // actions applied to a list
}

// State returns what the loop saw so far.
func (l *Loop) State() LoopState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}

// Alert prints a's line and notes the scraper's and the stuffing's.
func (l *Loop) Alert(_ context.Context, a alerts.Alert) error {
	now := l.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if a.State == alerts.Firing {
		l.st.Alerts++
		switch {
		case a.Type == alerts.TypeHeavyHitter && contains(a.Identities, ScraperAddr) && l.st.Alerted.IsZero():
			l.st.Alerted, l.st.AlertWindow = now, a.Time
		case a.Type == alerts.TypeCredentialStuffing && l.st.Stuffing.IsZero():
			l.st.Stuffing = now
		}
	}
	// The summary names identities, which are the client's choice.
	_, err := fmt.Fprintf(l.W, "%s  alert  %s %s %s: %s\n", now.UTC().Format(time.TimeOnly), a.State, a.Severity, a.Type, visible.Escape(a.Summary))
	return err
}

// Action prints a's line and notes the scraper's listing.
func (l *Loop) Action(_ context.Context, a alerts.Action) error {
	now := l.Now()
	l.mu.Lock()
	listed := false
	if a.Applied {
		l.st.Applied++
		if a.List == "challenge" && a.Target == ScraperAddr && l.st.Listed.IsZero() {
			l.st.Listed, l.st.ListedBy, listed = now, "policy:"+a.Policy, true
		}
	}
	l.mu.Unlock()
	if listed && l.Listed != nil {
		l.Listed(now)
	}
	what := "applied"
	if !a.Applied {
		what = "not applied: " + a.Why
	}
	ttl := ""
	if a.TTL != "" {
		ttl = " for " + a.TTL
	}
	_, err := fmt.Fprintf(l.W, "%s  action %s list + %s%s by policy %s (%s)\n", now.UTC().Format(time.TimeOnly), a.List, visible.Escape(a.Target), ttl, a.Policy, what)
	return err
}

// Check says what the story has not shown of the loop: the scraper
// challenged and blocked by its limits, its heavy_hitter alert, its entry
// on the challenge list and its requests challenged by the list after it.
// nil: all of it.
func Check(scraper *ActorStats, s LoopState) error {
	f := scraper.Firsts()
	var missing []string
	if f.Challenged.IsZero() || !s.Listed.IsZero() && !f.Challenged.Before(s.Listed) {
		missing = append(missing, "the scraper was not challenged by its limits")
	}
	if f.Blocked.IsZero() {
		missing = append(missing, "the scraper was not blocked")
	}
	if s.Alerted.IsZero() {
		missing = append(missing, "no heavy_hitter alert named the scraper")
	}
	if s.Listed.IsZero() {
		missing = append(missing, "no policy put the scraper on the challenge list")
	}
	if scraper.ChallengedSinceMark.Load() == 0 {
		missing = append(missing, "the scraper was not challenged by the challenge list")
	}
	if len(missing) == 0 {
		return nil
	}
	return errors.New("the loop was not shown: " + strings.Join(missing, "; "))
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
