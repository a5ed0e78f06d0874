package stream_test

import (
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
