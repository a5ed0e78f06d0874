package aggregator

import (
	"encoding"

	"github.com/ratewarden/ratewarden/decisions"
)

// aggregate is what every aggregate of a Partial does (Counts, Distinct,
// Latency, UpstreamLatency, Offenders), each in its own file: update from
// one decision or from rows of a record batch, merge another of its kind
// (T, its own pointer type), and append a deterministic encoding (equal
// aggregates, equal bytes), which its decode method reads back. The
// Partial holds one of each and loops over them (parts) where a call per
// aggregate costs nothing per event: per batch, per encoding.
// Partial.Update calls them directly instead, hashing each client once
// for the sketches and the lists, and Partial.Merge calls each Merge,
// whose argument is typed.
type aggregate[T any] interface {
	part
	// Merge adds o's events, as if this aggregate had counted them too.
	Merge(o T, m MergeMode) error
}

// part is an aggregate with its type erased: what the Partial's loops
// call.
type part interface {
	// Update counts one event, of any kind.
	Update(d *decisions.Decision)
	// UpdateColumns counts rows [lo, hi) of b, as Update would count each
	// of their events in order, to the same encoding.
	UpdateColumns(b *Batch, lo, hi int)
	encoding.BinaryAppender
	// decode reads what AppendBinary wrote into the aggregate, which must
	// be empty (its zero value, or new for Offenders).
	decode(r *reader) error
}

// MergeMode says what two aggregates being merged counted.
type MergeMode uint8

const (
	// MergeOverlapping: the two may have counted the same clients (two
	// windows, or two halves of one stream by arrival). A top-K list then
	// counts a client missing from one side at that side's floor, so its
	// counts stay upper bounds.
	MergeOverlapping MergeMode = iota
	// MergeDisjoint: the two counted disjoint clients, as the partials of
	// two Kinesis shards do (the edge partitions records by identity). Their
	// top-K lists merge without widening their error bounds. Resharding
	// breaks it for the windows that span the split or merge of shards: a
	// client's events then live on a parent and a child shard.
	MergeDisjoint
)

// mergeMode is the MergeMode disjoint says.
func mergeMode(disjoint bool) MergeMode {
	if disjoint {
		return MergeDisjoint
	}
	return MergeOverlapping
}

var (
	_ aggregate[*Counts]          = (*Counts)(nil)
	_ aggregate[*Distinct]        = (*Distinct)(nil)
	_ aggregate[*Latency]         = (*Latency)(nil)
	_ aggregate[*UpstreamLatency] = (*UpstreamLatency)(nil)
	_ aggregate[*Offenders]       = (*Offenders)(nil)
)
