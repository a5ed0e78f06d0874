package columnar

import (
	"bytes"
	"testing"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// FuzzDecode feeds Decode arbitrary bytes: it must return an error or
// events, never panic. Since the checksum stops almost every mutation at
// the door, the input is also decoded with the checksum skipped, by the
// fast reader (with panics let through, so that a missing bounds check
// is found rather than recovered) and by arrow-go's reader; when both
// accept it, they must agree. The fast reader also decodes a set of
// columns chosen by the input (DecodeColumnSet), which must not panic
// either and must give those columns wherever a full decode succeeds.
func FuzzDecode(f *testing.F) {
	for _, c := range compressions {
		for _, ds := range [][]decisions.Decision{generate(23, 3), decisiontest.EdgeCases()[:6]} {
			data, err := Encode(nil, ds, Options{Compression: c})
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
			f.Add(data[:len(data)-9]) // truncated before the end-of-stream marker
			for _, at := range []int{20, len(data) / 2, len(data) - 20} {
				bad := bytes.Clone(data)
				bad[at] ^= 0xff
				f.Add(bad)
			}
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Add([]byte(`{"v":1,"kind":"decision"}`))
	checked := NewDecoder()
	fast := &Decoder{skipChecksum: true, repanic: true}
	slow := &Decoder{skipChecksum: true, forceSlow: true}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, err := checked.Decode(data, nil); err != nil && len(got) != 0 {
			t.Fatalf("error %v with %d events", err, len(got))
		}
		a, errA := fast.Decode(data, nil)
		b, errB := slow.Decode(data, nil)
		// A set of columns, chosen by the input: reading what it decodes
		// never panics, and where every column decodes, it gives them.
		set := columnSets[len(data)%len(columnSets)]
		var some []decisions.Decision
		errSet := fast.DecodeColumnSet(data, set, func(c *Columns) error {
			some = append(some, fromColumns(c)...)
			return nil
		})
		if errA == nil && (errSet != nil || len(some) != len(a)) {
			t.Fatalf("set %#x: %d events (%v), a full decode gives %d", set, len(some), errSet, len(a))
		}
		if errA != nil || errB != nil {
			return
		}
		for i := range a {
			if want := exposed(a[i], set); !decisiontest.Equal(some[i], want) {
				t.Fatalf("set %#x, event %d:\n%s", set, i, decisiontest.Diff(some[i], want))
			}
		}
		if len(a) != len(b) || fast.Version() != slow.Version() {
			t.Fatalf("fast reader: %d events (v%d), arrow-go: %d (v%d)", len(a), fast.Version(), len(b), slow.Version())
		}
		for i := range a {
			if !decisiontest.Equal(a[i], b[i]) {
				t.Fatalf("event %d: the readers disagree:\n%s", i, decisiontest.Diff(a[i], b[i]))
			}
		}
	})
}
