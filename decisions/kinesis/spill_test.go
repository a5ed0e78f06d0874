package kinesis

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
)

// TestSpill takes the stream away mid-write and back, and across a
// restart of the writer: every event reaches the stream exactly once
// (the outage resets connections before forwarding, so no answer is
// lost), and each partition key's events arrive in the order written.
func TestSpill(t *testing.T) {
	ep := endpoint(t)
	kc := client(t, ep)
	stream := newStream(t, kc, 2)
	p := &proxy{target: ep}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	var sl fakeSleep
	open := func() (*Spill, *Sink) {
		sink, err := New(client(t, srv.URL), Options{Stream: stream, Partitions: 8, MaxRetries: 2, Sleep: sl.Sleep})
		if err != nil {
			t.Fatal(err)
		}
		sp, err := NewSpill(sink, SpillOptions{Dir: dir, Retry: 10 * time.Millisecond, Log: seglog.Options{SegmentBytes: 16 << 10}})
		if err != nil {
			t.Fatal(err)
		}
		return sp, sink
	}
	g := decisiontest.NewGenerator(21, start)
	var want []decisions.Decision
	write := func(sp *Spill, batches int) {
		t.Helper()
		for range batches {
			ds := g.Batch(200)
			for i := range ds {
				ds[i].RequestID = fmt.Sprintf("e%d", len(want)+i)
			}
			want = append(want, ds...)
			if err := sp.WriteBatch(ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitDrained := func(sp *Spill) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for sp.Stats().Backlog > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("backlog not drained: %+v", sp.Stats())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	sp, _ := open()
	write(sp, 3) // delivered directly
	if st := sp.Stats(); st.Spilled != 0 {
		t.Fatalf("spilled with the stream up: %+v", st)
	}
	p.down.Store(true)
	write(sp, 4) // the first batch is given up and spilled, the rest follow it
	if st := sp.Stats(); st.Spilled != 800 || st.Backlog != 800 {
		t.Fatalf("stats while down %+v, want 800 spilled and waiting", st)
	}
	// Close with a backlog; a new writer drains it before anything else.
	if err := sp.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	sp, _ = open()
	if st := sp.Stats(); st.Backlog != 800 {
		t.Fatalf("reopened backlog %d, want 800", st.Backlog)
	}
	write(sp, 2) // spilled behind the backlog
	p.down.Store(false)
	waitDrained(sp)
	write(sp, 2) // direct again
	st := sp.Stats()
	if st.Spilled != 400 || st.Drained != 1200 || st.Dropped != 0 || st.Backlog != 0 {
		t.Fatalf("stats of the second writer %+v, want 400 spilled, 1200 drained", st)
	}
	if err := sp.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	recs, err := readStream(kc, stream)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	lastByKey := map[string]int{}
	for _, r := range recs {
		ds, err := Decode(r.Data, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			seen[d.RequestID]++
			var n int
			fmt.Sscanf(d.RequestID, "e%d", &n)
			if last, ok := lastByKey[*r.PartitionKey]; ok && n <= last {
				t.Fatalf("key %s: event %d after %d", *r.PartitionKey, n, last)
			}
			lastByKey[*r.PartitionKey] = n
		}
	}
	for _, d := range want {
		if seen[d.RequestID] != 1 {
			t.Fatalf("event %s delivered %d times", d.RequestID, seen[d.RequestID])
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("%d distinct events on the stream, want %d", len(seen), len(want))
	}
	// The drained spill log keeps only its active segment.
	r, err := decisionlog.Open(dir, decisionlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	for {
		if _, _, err := r.Next(context.Background(), false); err != nil {
			break
		}
		n++
	}
	if n >= 1200 {
		t.Errorf("%d events left in the drained spill log, want only the active segment's", n)
	}
}
