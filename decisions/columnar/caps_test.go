package columnar

import (
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestDecodeFieldCaps: a record batch with a value longer than the edge
// writes (decisions.FieldCaps) is corrupt, through Decode and through
// DecodeColumns alike, whether the column is a string column (user_id) or
// a dictionary (tier, rule, node...); values at the cap decode.
func TestDecodeFieldCaps(t *testing.T) {
	for _, f := range decisions.FieldCaps {
		if c := colByName(f.Name); c < 0 || colCaps[c] != f.Max {
			t.Fatalf("%s: no column capped at %d", f.Name, f.Max)
		}
	}
	set := map[string]func(d *decisions.Decision, v string){
		"user_id": func(d *decisions.Decision, v string) { d.UserID = v },
		"tier":    func(d *decisions.Decision, v string) { d.Tier = v },
		"rule":    func(d *decisions.Decision, v string) { d.Rule = v },
		"node":    func(d *decisions.Decision, v string) { d.Node = v },
		"reason":  func(d *decisions.Decision, v string) { d.Reason = v },
	}
	for _, f := range decisions.FieldCaps {
		put := set[f.Name]
		if put == nil {
			continue
		}
		for _, n := range []int{f.Max, f.Max + 1, 400_000} {
			ds := generate(3, 4)
			put(&ds[1], strings.Repeat("x", n))
			b, err := NewEncoder(Options{Compression: ZstdDict}).Encode(nil, ds)
			if err != nil {
				t.Fatal(err)
			}
			_, derr := NewDecoder().Decode(b, nil)
			cerr := NewDecoder().DecodeColumns(b, func(*Columns) error { return nil })
			want := ""
			if n > f.Max {
				want = "column " + f.Name + ": "
			}
			for _, err := range []error{derr, cerr} {
				switch {
				case want == "" && err != nil:
					t.Errorf("%s of %d bytes: %v", f.Name, n, err)
				case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "bytes, at most")):
					t.Errorf("%s of %d bytes: error %v, want one naming the column and the cap", f.Name, n, err)
				}
			}
		}
	}
}

func colByName(name string) int {
	for c := range columns {
		if columns[c].name == name {
			return c
		}
	}
	return -1
}
