package accuracy

import "time"

// Oracle returns the exact decision for every request of tr under a limit
// of limit requests per window: request i, at true instant t, is allowed
// iff fewer than limit requests of its identity were allowed in
// (t − window, t]. Refused requests do not count, so a client that keeps
// knocking is let in again as soon as its own admissions age out; this is
// the limit a client would observe if one perfectly synchronised counter
// kept the exact log of admissions, and the one every store is compared
// with. It uses true time: the nodes' clock skew is part of the error
// measured, not of the reference.
func Oracle(tr *Trace, limit int64, window time.Duration) []bool {
	logs := make([]slidingLog, len(tr.Classes))
	out := make([]bool, len(tr.Requests))
	for i, r := range tr.Requests {
		l := &logs[r.ID]
		if l.count(r.At, window) < limit {
			l.push(r.At)
			out[i] = true
		}
	}
	return out
}

// slidingLog is the instants of one identity's admissions within the last
// window, oldest first: a queue whose storage is reused as it slides.
type slidingLog struct {
	at   []time.Duration
	head int
}

// count drops the admissions at or before now − window and returns how
// many remain.
func (l *slidingLog) count(now, window time.Duration) int64 {
	for l.head < len(l.at) && l.at[l.head] <= now-window {
		l.head++
	}
	if l.head > 1024 && l.head*2 > len(l.at) {
		l.at = append(l.at[:0], l.at[l.head:]...)
		l.head = 0
	}
	return int64(len(l.at) - l.head)
}

func (l *slidingLog) push(at time.Duration) { l.at = append(l.at, at) }
