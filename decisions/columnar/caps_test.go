package columnar

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

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

// TestDecodeFieldCapsAsRead: another writer's value that is not UTF-8 is
// capped at its length as it is read, each such byte a U+FFFD of three
// bytes (as JSON writes it, and the JSON codec's reader then refuses
// it), in a string column (user_id) and a dictionary (tier) alike; before,
// a user_id of 100 such bytes decoded, and its JSON line was read as 300
// bytes and refused.
func TestDecodeFieldCapsAsRead(t *testing.T) {
	ds := generate(19, 3)
	data, _ := Encode(nil, ds, Options{})
	cols, md := columnsOf(t, data)
	delete(md, KeyChecksum) // another writer's, decoded unchecked
	mem := memory.DefaultAllocator
	for _, n := range []int{decisions.MaxNameLen / 3, decisions.MaxNameLen/3 + 1} {
		bad := strings.Repeat("\xff", n)
		sb := array.NewStringBuilder(mem)
		sb.AppendValues([]string{"u", bad, "u"}, nil)
		db := array.NewDictionaryBuilder(mem, &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}).(*array.BinaryDictionaryBuilder)
		for _, v := range []string{"anonymous", bad, "anonymous"} {
			if err := db.AppendString(v); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			name string
			arr  arrow.Array
		}{{"user_id", sb.NewArray()}, {"tier", db.NewArray()}} {
			cs := maps.Clone(cols)
			cs[c.name] = c.arr
			for name, d := range decoders() {
				got, err := d.Decode(stream(t, md, false, cs), nil)
				switch {
				case n <= decisions.MaxNameLen/3 && err != nil:
					t.Errorf("%s, %s of %d bytes not UTF-8: %v", name, c.name, n, err)
				case n <= decisions.MaxNameLen/3 && len(got) == 3:
					line := decisions.AppendJSON(nil, &got[1])
					if _, _, err := decisions.ParseJSON(line); err != nil {
						t.Errorf("%s, %s of %d bytes not UTF-8: its JSON line is refused: %v", name, c.name, n, err)
					}
				case n > decisions.MaxNameLen/3 && (err == nil || !strings.Contains(err.Error(), fmt.Sprintf("column %s: ", c.name)) || !strings.Contains(err.Error(), fmt.Sprintf("of %d bytes, at most", 3*n))):
					t.Errorf("%s, %s of %d bytes not UTF-8: error %v, want one naming the column and %d bytes", name, c.name, n, err, 3*n)
				}
			}
			c.arr.Release()
		}
	}
}

// TestDecodeMaxRows: a batch of MaxRows events decodes; one more is
// refused as corrupt before its rows are read, through the fast reader
// and arrow-go's, by Decode and DecodeColumns alike. Before, only the
// bytes a batch decompresses to were bounded: 43 KB of minimal events,
// five million of them, made a reader hold half a gigabyte. The bound is
// lowered to 3,000 for the test (a million events under the race
// detector take two minutes); it is MaxRows otherwise.
func TestDecodeMaxRows(t *testing.T) {
	if maxRows != MaxRows || MaxRows != 1<<20 {
		t.Fatalf("the bound is %d, MaxRows %d", maxRows, MaxRows)
	}
	defer func(n int) { maxRows = n }(maxRows)
	maxRows = 3000
	ds := make([]decisions.Decision, maxRows+1)
	for i := range ds {
		ds[i].Time = t0
	}
	for _, n := range []int{maxRows, maxRows + 1} {
		data, err := Encode(nil, ds[:n], Options{Compression: Zstd})
		if err != nil {
			t.Fatal(err)
		}
		for _, slow := range []bool{false, true} {
			d := NewDecoder()
			d.forceSlow = slow
			got, err := d.Decode(data, nil)
			rows := 0
			cerr := d.DecodeColumns(data, func(c *Columns) error { rows += c.Len; return nil })
			if n <= maxRows && (err != nil || len(got) != n || cerr != nil || rows != n) {
				t.Errorf("%d events, slow %v: decoded %d, %v; columns %d, %v", n, slow, len(got), err, rows, cerr)
			}
			if n > maxRows && (err == nil || cerr == nil || !strings.Contains(err.Error(), "more than the 3000 a batch may hold")) {
				t.Errorf("%d events, slow %v: decoded %d, %v; columns %v; want them refused", n, slow, len(got), err, cerr)
			}
		}
	}
}
