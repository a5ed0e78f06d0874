package aggregator

import (
	"fmt"

	"github.com/ratewarden/ratewarden/decisions/seglog"
)

// lossSeen is how much of the reader's problems a logRun has passed to
// LogOptions.Problem.
type lossSeen struct {
	corrupt     int  // seglog problems passed, of Reader.Corrupt
	corruptFull bool // Reader.Corrupt keeps no more: stop copying it
	problems    uint64
	undecodable int // of Reader.Undecodable
	badBatch    uint64
	removed     bool
	committed   uint64 // the position last committed as a consumer offset
	commitOK    bool   // committed is set
	commitErr   bool   // a commit failed and was reported
}

// lost returns the reader's loss. Events before the log's oldest segment
// are lost only to a run that resumed from a position before it; a first
// run starts wherever the log starts.
func (l *logRun) lost() seglog.Loss {
	lo := l.rd.Loss()
	if !l.p.resumed {
		lo.Removed, lo.Start = 0, 0
	}
	return lo
}

// noteLoss passes the problems the reader met since the last call to
// LogOptions.Problem. It costs two counter reads when there are none.
func (l *logRun) noteLoss() {
	if l.o.Problem == nil || l.rd == nil {
		return
	}
	lo, seen := l.lost(), &l.seen
	if lo.Removed > 0 && !seen.removed {
		seen.removed = true
		l.o.Problem(fmt.Errorf("%s: events at offsets %d to %d were removed from the log before partition %s read them (it resumed at %d; the log now starts at %d): %w",
			l.o.Dir, lo.Start-lo.Removed, lo.Start-1, l.p.name, lo.Start-lo.Removed, lo.Start, seglog.ErrMissing))
	}
	if lo.Problems != seen.problems && !seen.corruptFull {
		seen.problems = lo.Problems
		ps := l.rd.Corrupt()
		for _, p := range ps[min(seen.corrupt, len(ps)):] {
			l.o.Problem(p)
		}
		seen.corruptFull = len(ps) == seen.corrupt
		seen.corrupt = len(ps)
	}
	if n := l.rd.Stats().BadBatch; n != seen.badBatch {
		seen.badBatch = n
		us := l.rd.Undecodable()
		for _, e := range us[min(seen.undecodable, len(us)):] {
			l.o.Problem(fmt.Errorf("%s: %w", l.o.Dir, e))
		}
		seen.undecodable = len(us)
	}
}

// commit commits the position the state holds as the log's consumer
// offset of LogOptions.Consumer, when it moved.
func (l *logRun) commit() {
	next := l.p.r.Next()
	if l.o.Consumer == "" || l.seen.commitOK && next == l.seen.committed {
		return
	}
	if err := seglog.CommitReaderOffset(l.o.Dir, l.o.Consumer, next); err != nil {
		if !l.seen.commitErr && l.o.Problem != nil {
			l.o.Problem(fmt.Errorf("%w (retention will not know what partition %s has read)", err, l.p.name))
		}
		l.seen.commitErr = true
		return
	}
	l.seen.committed, l.seen.commitOK = next, true
}
