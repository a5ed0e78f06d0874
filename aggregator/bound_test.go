package aggregator

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestRunKinesisRecordAhead: a record of events stamped an hour ahead of
// its arrival on the stream (an edge whose clock jumped), between records
// of the present, does not move a shard's watermark: its events are
// counted in the future and none of the present's is late. The bound is
// the record's arrival on Kinesis, not the aggregator's clock: here that
// clock reads a day ahead, and bounded by it the record's twenty events
// would make a quorum and close the present.
func TestRunKinesisRecordAhead(t *testing.T) {
	s := newStandIns(t)
	stream, table := s.stream(t, 1)
	// One client a put, so that each put is one record in time order
	// (the sink partitions by client).
	decided := func(at time.Time, client byte) decisions.Decision {
		return decisions.Decision{Kind: decisions.KindDecision, Time: at, Node: "edge-1", Tier: "anonymous",
			Rule: "anonymous:global", Outcome: decisions.Allow, ClientIP: netip.AddrFrom4([4]byte{198, 51, 100, client})}
	}
	var before, ahead, after []decisions.Decision
	for i := range 40 {
		before = append(before, decided(t0.Add(time.Duration(i)*250*time.Millisecond), 1))
		after = append(after, decided(t0.Add(10*time.Second+time.Duration(i)*250*time.Millisecond), 3))
	}
	jumped := time.Now().Add(time.Hour)
	for range 20 {
		ahead = append(ahead, decided(jumped, 2))
	}
	for _, ds := range [][]decisions.Decision{before, ahead, after} {
		s.put(t, stream, ds)
	}
	out := t.TempDir()
	o := s.options(stream, table, "one", &StateDir{Dir: t.TempDir()}, &PartialsDir{Dir: out})
	o.Rollup.Late = LateDrop
	o.Now = func() time.Time { return jumped.Add(23 * time.Hour) } // never idle: the clock stands
	r := start(o)
	// Every window of the present but the last (second 19, 4 events),
	// which nothing closes.
	waitEvents(t, out, 76)
	st := r.stop(t)
	if got := fmt.Sprintf("events %d, late %d, future %d", st.Rollup.Events, st.Rollup.Late, st.Rollup.Future); got != "events 100, late 0, future 20" {
		t.Fatalf("%s, want events 100, late 0, future 20", got)
	}
}
