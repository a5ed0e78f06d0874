package lists

import (
	"slices"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// Diff returns the feedback events that turn prev into cur, as seen at now,
// one per change, in target order:
//
//   - add, when a target applies in cur and did not in prev (a new entry,
//     an approved one, a renewed one), or its expiry changed; TTL is what
//     is left of it at now, Node who wrote it;
//   - remove, when a target that applied in prev, and had not expired by
//     now, no longer does; Node is who removed it and Reason why, as its
//     tombstone says ("unknown" and none without one: a hand-edited file).
//
// An entry that expires is no change: its add event carried its TTL, so
// replay expires it too. Pending entries are no change until approved.
func Diff(list string, prev, cur *List, now time.Time) []decisions.Decision {
	p, c := live(prev), live(cur)
	tombs := map[string]*Entry{}
	for i, es := 0, cur.Entries(); i < len(es); i++ {
		if !es[i].Removed.IsZero() {
			tombs[es[i].Target] = &es[i]
		}
	}
	var out []decisions.Decision
	for t, ce := range c {
		if !ce.Applies(now) {
			continue
		}
		if pe := p[t]; pe != nil && pe.Applies(now) && pe.Expires.Equal(ce.Expires) {
			continue
		}
		d := decisions.Decision{Kind: decisions.KindFeedback, Time: now, Node: ce.By, Reason: ce.Reason,
			List: list, Action: "add", Target: t}
		if !ce.Expires.IsZero() {
			d.TTL = ce.Expires.Sub(now)
		}
		out = append(out, d)
	}
	for t, pe := range p {
		if ce := c[t]; (ce != nil && ce.Applies(now)) || !pe.Applies(now) {
			continue
		}
		d := decisions.Decision{Kind: decisions.KindFeedback, Time: now, Node: "unknown", List: list, Action: "remove", Target: t}
		if tb := tombs[t]; tb != nil {
			d.Node, d.Reason = tb.By, tb.Reason
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b decisions.Decision) int {
		if c := strings.Compare(a.Target, b.Target); c != 0 {
			return c
		}
		return strings.Compare(a.Action, b.Action)
	})
	return out
}

// live returns, by target, the longest-lived entry of l that is neither
// pending nor removed.
func live(l *List) map[string]*Entry {
	m := map[string]*Entry{}
	es := l.Entries()
	for i := range es {
		e := &es[i]
		if e.Pending || !e.Removed.IsZero() {
			continue
		}
		if o := m[e.Target]; o == nil || longer(e, o) {
			m[e.Target] = e
		}
	}
	return m
}

func longer(a, b *Entry) bool {
	switch {
	case b.Expires.IsZero():
		return false
	case a.Expires.IsZero():
		return true
	}
	return a.Expires.After(b.Expires)
}
