package decisions

import (
	"net/netip"
	"testing"
)

func TestPrivateWriter(t *testing.T) {
	w := &memWriter{}
	p, err := NewPrivacy(Truncate, Keep, nil)
	if err != nil {
		t.Fatal(err)
	}
	pw := Private(p, w)
	batch := []Decision{{ClientIP: netip.MustParseAddr("203.0.113.77")}, {Kind: KindDrops, Dropped: 1}}
	if err := pw.WriteBatch(batch); err != nil {
		t.Fatal(err)
	}
	if got := w.got[0]; got.ClientIP.String() != "203.0.113.0" || got.Privacy != "truncate/keep" || w.got[1].Privacy != "" {
		t.Errorf("written %+v", w.got)
	}
	// The default keeps everything and still says so in every event.
	keep, _ := NewPrivacy(Keep, Keep, nil)
	if err := Private(keep, w).WriteBatch([]Decision{{ClientIP: netip.MustParseAddr("203.0.113.77")}}); err != nil {
		t.Fatal(err)
	}
	if got := w.got[2]; got.ClientIP.String() != "203.0.113.77" || got.Privacy != "keep/keep" {
		t.Errorf("keep/keep wrote %+v", got)
	}
	if Private(nil, w) != BatchWriter(w) {
		t.Error("no treatment still wraps the writer")
	}
}

func TestTee(t *testing.T) {
	a, b := &memWriter{}, &memWriter{}
	w := Tee(a, b)
	if err := w.WriteBatch([]Decision{sample()}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if len(a.got) != 1 || len(b.got) != 1 || a.flushes != 1 || b.flushes != 1 {
		t.Errorf("a %d/%d b %d/%d", len(a.got), a.flushes, len(b.got), b.flushes)
	}
}
