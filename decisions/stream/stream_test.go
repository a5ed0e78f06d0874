package stream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/stream"
)

// TestBatchRows reads a batch of log records that starts inside its first
// record, holds a corrupt record and a filter, and checks every row is
// handed over once, at its position, with the corrupt record reported once.
func TestBatchRows(t *testing.T) {
	g := decisiontest.NewGenerator(1, time.Unix(1700000000, 0))
	evs := g.Batch(30)
	enc := func(ds []decisions.Decision) []byte {
		b, err := columnar.Encode(nil, ds, columnar.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := &stream.Batch{
		Partition: "log",
		From:      stream.Offset(104),
		To:        stream.Offset(130),
		Records: []stream.Record{
			{Pos: stream.Offset(100), Codec: columnar.CodecArrow, Data: enc(evs[:10]), Count: 10},
			{Pos: stream.Offset(110), Codec: columnar.CodecArrow, Data: []byte("not arrow"), Count: 10},
			{Pos: stream.Offset(120), Codec: columnar.CodecArrow, Data: enc(evs[20:]), Count: 10},
		},
		Filter: func(rows columnar.Rows, first stream.Position) []bool {
			skip := make([]bool, rows.Len())
			for i := range skip {
				skip[i] = (first.Offset()+uint64(i))%2 == 0
			}
			return skip
		},
	}
	var lost []int
	b.Corrupt = func(rec *stream.Record, n int, err error) {
		if rec.Pos != stream.Offset(110) || err == nil {
			t.Errorf("corrupt %v: %v", rec.Pos, err)
		}
		lost = append(lost, n)
	}
	var got []uint64
	read := func() uint64 {
		got = got[:0]
		n, err := b.Rows(columnar.NewDecoder(), func(r *stream.Rows) error {
			times := r.Columns.Times(nil)
			for i := r.Lo; i < r.Len(); i++ {
				if r.Skip == nil || r.Skip[i] {
					continue
				}
				off := r.Pos.Offset() + uint64(i)
				if want := evs[off-100].Time.UnixNano(); times[i] != want {
					t.Errorf("row %d of %v: time %d, want %d", i, r.Pos, times[i], want)
				}
				got = append(got, off)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for range 2 {
		if n := read(); n != 16 {
			t.Errorf("rows handed over %d, want 16 (6 + 10)", n)
		}
		want := []uint64{105, 107, 109, 121, 123, 125, 127, 129}
		if len(got) != len(want) {
			t.Fatalf("offsets %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("offsets %v, want %v", got, want)
			}
		}
	}
	if len(lost) != 1 || lost[0] != 10 {
		t.Errorf("corrupt reports %v, want one of 10 events", lost)
	}
}

// TestBatchRowsEvents hands decoded events over as one run of rows.
func TestBatchRowsEvents(t *testing.T) {
	evs := decisiontest.NewGenerator(2, time.Unix(1700000000, 0)).Batch(5)
	b := &stream.Batch{Partition: "stdin", From: stream.Offset(1), To: stream.Offset(6), Events: evs}
	calls := 0
	n, err := b.Rows(columnar.NewDecoder(), func(r *stream.Rows) error {
		calls++
		if r.Pos != stream.Offset(1) || r.Lo != 0 || len(r.Events) != 5 || r.Events[4].Time != evs[4].Time {
			t.Errorf("rows %+v", r)
		}
		return nil
	})
	if err != nil || n != 5 || calls != 1 {
		t.Errorf("Rows = %d, %v after %d calls; want 5 rows in one call", n, err, calls)
	}
}

// TestHandedAndHandleFunc: Handed says what the last Rows handed over, a
// part of the batch when f stops it; a HandleFunc opens where the source
// is and handles with its function.
func TestHandedAndHandleFunc(t *testing.T) {
	evs := decisiontest.NewGenerator(2, time.Unix(1700000000, 0)).Batch(7)
	b := &stream.Batch{Partition: "stdin", From: stream.Offset(3), To: stream.Offset(10), Events: evs}
	var called int
	h := stream.HandleFunc(func(_ context.Context, b *stream.Batch) error {
		called++
		n, err := b.Rows(columnar.NewDecoder(), func(*stream.Rows) error { return nil })
		if err != nil || n != 7 || b.Handed() != 7 {
			t.Errorf("Rows: %d, %v; Handed %d; want 7", n, err, b.Handed())
		}
		return nil
	})
	ctx := context.Background()
	if at, err := h.Open(ctx, "stdin", stream.Offset(3)); err != nil || at != stream.Offset(3) {
		t.Fatalf("Open: %v %v", at, err)
	}
	if err := h.Handle(ctx, b); err != nil || called != 1 {
		t.Fatalf("Handle: %v, %d calls", err, called)
	}
	if h.Idle(ctx, "stdin") != nil || h.Close(ctx, "stdin", true) != nil {
		t.Fatal("Idle or Close failed")
	}
	stop := errors.New("stop")
	if _, err := b.Rows(columnar.NewDecoder(), func(*stream.Rows) error { return stop }); err != stop || b.Handed() != 7 {
		t.Fatalf("Rows stopped: %v, Handed %d", err, b.Handed())
	}
	empty := &stream.Batch{Partition: "stdin"}
	if n, err := empty.Rows(columnar.NewDecoder(), nil); n != 0 || err != nil || empty.Handed() != 0 {
		t.Fatalf("an empty batch: %d %v", n, err)
	}
}
