package aggregator

import (
	"fmt"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"

	"github.com/ratewarden/ratewarden/decisions"
)

// LatencyAccuracy is the relative accuracy of the store-latency quantiles.
const LatencyAccuracy = 0.01

// latencyBins bounds a sketch's memory; with 1 % accuracy, 2048 bins span
// about 17 orders of magnitude, far more than 1 µs to an hour.
const latencyBins = 2048

// Latency is a distribution of latencies (the counter store's, the
// origin's), in milliseconds, as a DDSketch: any quantile within 1 % relative error, and
// mergeable. Decisions with no store latency (in-process stores, lists) are
// not in it. The zero value is ready to use; it is not safe for concurrent
// use.
type Latency struct {
	Sketch *ddsketch.DDSketch
}

var latencyMapping = func() mapping.IndexMapping {
	m, err := mapping.NewLogarithmicMapping(LatencyAccuracy)
	if err != nil {
		panic(err)
	}
	return m
}()

func newLatencySketch() *ddsketch.DDSketch {
	return ddsketch.NewDDSketch(latencyMapping, store.NewCollapsingLowestDenseStore(latencyBins),
		store.NewCollapsingLowestDenseStore(latencyBins))
}

// Update adds d's store latency.
func (l *Latency) Update(d *decisions.Decision) {
	if d.Kind == decisions.KindDecision {
		l.Add(d.StoreLatency)
	}
}

// Add adds one latency; zero and negative ones (nothing was waited for)
// are not recorded.
func (l *Latency) Add(v time.Duration) {
	if v <= 0 {
		return
	}
	if l.Sketch == nil {
		l.Sketch = newLatencySketch()
	}
	l.Sketch.Add(float64(v) / 1e6)
}

// Merge adds o's values to l.
func (l *Latency) Merge(o *Latency) error {
	if o.Sketch == nil {
		return nil
	}
	if l.Sketch == nil {
		l.Sketch = newLatencySketch()
	}
	if err := l.Sketch.MergeWith(o.Sketch); err != nil {
		return fmt.Errorf("merge store latency: %w", err)
	}
	return nil
}

// Count is the number of latencies recorded.
func (l *Latency) Count() uint64 {
	if l.Sketch == nil {
		return 0
	}
	return uint64(l.Sketch.GetCount() + 0.5)
}

// Quantile returns the q-quantile in milliseconds (0 when empty).
func (l *Latency) Quantile(q float64) float64 {
	if l.Sketch == nil || l.Sketch.IsEmpty() {
		return 0
	}
	v, err := l.Sketch.GetValueAtQuantile(q)
	if err != nil {
		return 0
	}
	return v
}

// Bins calls f with each bin's representative value (milliseconds) and
// count, smallest value first: the Values/Counts form of a CloudWatch
// metric.
func (l *Latency) Bins(f func(value, count float64)) {
	if l.Sketch == nil {
		return
	}
	l.Sketch.ForEach(func(v, c float64) bool { f(v, c); return false })
}

// AppendBinary appends l's encoding.
func (l *Latency) AppendBinary(b []byte) []byte {
	if l.Sketch == nil || l.Sketch.IsEmpty() {
		return appendUvarint(b, 0)
	}
	var p []byte
	l.Sketch.Encode(&p, true)
	return appendBytes(b, p)
}

func (l *Latency) decode(r *reader) error {
	p := r.bytes()
	if r.err != nil || len(p) == 0 {
		return r.err
	}
	sk := newLatencySketch()
	if err := sk.DecodeAndMergeWith(p); err != nil {
		r.fail(err)
		return fmt.Errorf("decode store latency: %w", err)
	}
	l.Sketch = sk
	return nil
}
