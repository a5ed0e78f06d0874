package columnar

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// fromColumns makes events of the fields Columns exposes, those of the
// columns decoded (c.Decoded) only.
func fromColumns(c *Columns) []decisions.Decision {
	has := c.Decoded.Has
	times := c.Times(nil)
	out := make([]decisions.Decision, c.Len)
	for i := range out {
		d := &out[i]
		if has(ColumnKind) {
			d.Kind = decisions.Kind(c.Kind[i])
		}
		if has(ColumnOutcome) {
			d.Outcome = decisions.Outcome(c.Outcome[i])
		}
		if has(ColumnTime) && times[i] != NullTime {
			d.Time = time.Unix(0, times[i]).UTC()
		}
		for _, x := range []struct {
			col ColumnSet
			dst *string
			src *Dict
		}{{ColumnNode, &d.Node, &c.Node}, {ColumnTier, &d.Tier, &c.Tier}, {ColumnRule, &d.Rule, &c.Rule},
			{ColumnReason, &d.Reason, &c.Reason}, {ColumnResponseError, &d.ResponseError, &c.ResponseError},
			{ColumnList, &d.List, &c.List}, {ColumnAction, &d.Action, &c.Action}} {
			if has(x.col) {
				*x.dst = x.src.Values[x.src.Indices(nil, c.Len)[i]]
			}
		}
		d.UserID = string(c.UserID.Bytes(i))
		if has(ColumnClientIP) {
			switch c.ClientIPFamily[i] {
			case 4:
				d.ClientIP = netip.AddrFrom16([16]byte(c.ClientIP[16*i:])).Unmap()
			case 6:
				d.ClientIP = netip.AddrFrom16([16]byte(c.ClientIP[16*i:])).WithZone(c.ClientIPZone.Values[c.ClientIPZone.At(i)])
			}
		}
		d.StoreLatency = time.Duration(c.StoreLatency.Int(i))
		d.UpstreamLatency = time.Duration(c.UpstreamLatency.Int(i))
		d.Dropped = c.Dropped.Uint(i)
	}
	return out
}

// exposed keeps the fields of d that the columns of set expose.
func exposed(d decisions.Decision, set ColumnSet) decisions.Decision {
	var e decisions.Decision
	for _, x := range []struct {
		col ColumnSet
		f   func(dst, src *decisions.Decision)
	}{
		{ColumnKind, func(dst, src *decisions.Decision) { dst.Kind = src.Kind }},
		{ColumnTime, func(dst, src *decisions.Decision) { dst.Time = src.Time }},
		{ColumnNode, func(dst, src *decisions.Decision) { dst.Node = src.Node }},
		{ColumnClientIP, func(dst, src *decisions.Decision) { dst.ClientIP = src.ClientIP }},
		{ColumnUserID, func(dst, src *decisions.Decision) { dst.UserID = src.UserID }},
		{ColumnTier, func(dst, src *decisions.Decision) { dst.Tier = src.Tier }},
		{ColumnRule, func(dst, src *decisions.Decision) { dst.Rule = src.Rule }},
		{ColumnOutcome, func(dst, src *decisions.Decision) { dst.Outcome = src.Outcome }},
		{ColumnReason, func(dst, src *decisions.Decision) { dst.Reason = src.Reason }},
		{ColumnStoreLatency, func(dst, src *decisions.Decision) { dst.StoreLatency = src.StoreLatency }},
		{ColumnList, func(dst, src *decisions.Decision) { dst.List = src.List }},
		{ColumnAction, func(dst, src *decisions.Decision) { dst.Action = src.Action }},
		{ColumnDropped, func(dst, src *decisions.Decision) { dst.Dropped = src.Dropped }},
		{ColumnUpstreamLatency, func(dst, src *decisions.Decision) { dst.UpstreamLatency = src.UpstreamLatency }},
		{ColumnResponseError, func(dst, src *decisions.Decision) { dst.ResponseError = src.ResponseError }},
	} {
		if set.Has(x.col) {
			x.f(&e, &d)
		}
	}
	return e
}

// TestDecodeColumns: the columns of every batch, in every compression and
// through both readers, read back the fields Decode gives, edge cases
// (null times, IPv6 zones, every width) and an older writer's batch
// (missing columns read as zero values) included; DecodeColumnSet gives
// those of the columns in its set the same way, leaves the others empty
// and says which are which in Decoded.
func TestDecodeColumns(t *testing.T) {
	var union ColumnSet
	for _, s := range columnSets[:15] {
		union |= s
	}
	if union != AllColumns {
		t.Fatalf("the sets tested cover %#x, AllColumns is %#x", union, AllColumns)
	}
	f := func(name string, data []byte) {
		t.Helper()
		for dname, d := range decoders() {
			all, err := d.Decode(data, nil)
			if err != nil {
				t.Fatalf("%s, %s: %v", name, dname, err)
			}
			for _, set := range columnSets {
				var got []decisions.Decision
				each := func(c *Columns) error {
					if c.Decoded != set {
						t.Errorf("%s, %s, set %#x: Decoded %#x", name, dname, set, c.Decoded)
					}
					checkEmpty(t, c)
					got = append(got, fromColumns(c)...)
					return nil
				}
				var err error
				if set == AllColumns {
					err = d.DecodeColumns(data, each)
				} else {
					err = d.DecodeColumnSet(data, set, each)
				}
				if err != nil {
					t.Fatalf("%s, %s, set %#x: %v", name, dname, set, err)
				}
				want := make([]decisions.Decision, len(all))
				for i := range all {
					want[i] = exposed(all[i], set)
				}
				checkSame(t, got, want)
			}
		}
	}
	for _, c := range compressions {
		data, err := Encode(nil, decisiontest.EdgeCases(), Options{Compression: c})
		if err != nil {
			t.Fatal(err)
		}
		f("edge cases, "+c.String(), data)
		data, _ = Encode(nil, generate(3, 3072), Options{Compression: c})
		f("generated, "+c.String(), data)
	}
	cols, md := columnsOf(t, mustEncode(t, generate(12, 50)))
	md[KeySchemaVersion] = "1"
	for _, name := range []string{"status", "upstream_latency_ns", "response_error"} {
		delete(cols, name)
	}
	f("version 1", stream(t, md, true, cols))
}

func mustEncode(t *testing.T, ds []decisions.Decision) []byte {
	t.Helper()
	data, err := Encode(nil, ds, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestDecodeColumnsErrors: the callback's error comes back as it is; a
// corrupt batch is a decoding error and the callback is not called.
func TestDecodeColumnsErrors(t *testing.T) {
	data := mustEncode(t, generate(4, 100))
	stop := errors.New("stop")
	d := NewDecoder()
	if err := d.DecodeColumns(data, func(*Columns) error { return stop }); err != stop {
		t.Errorf("callback's error: got %v", err)
	}
	corrupt := append([]byte(nil), data...)
	corrupt[len(corrupt)/2] ^= 0xff
	called := false
	if err := d.DecodeColumns(corrupt, func(*Columns) error { called = true; return nil }); err == nil || called {
		t.Errorf("corrupt batch: err %v, called %v", err, called)
	}
	if err := d.DecodeColumns(data, func(*Columns) error { return nil }); err != nil {
		t.Errorf("after errors: %v", err)
	}
}

// TestDecodeRows: DecodeRows hands over columns for Arrow streams, read
// by either reader, and events for JSON lines, as many as Decode gives.
func TestDecodeRows(t *testing.T) {
	ds := generate(5, 300)
	data := mustEncode(t, ds)
	var jsonl []byte
	for i := range ds {
		jsonl = append(decisions.AppendJSON(jsonl, &ds[i]), '\n')
	}
	f := func(d *Decoder, c Codec, payload []byte, columns bool) {
		t.Helper()
		n := 0
		err := d.DecodeRows(c, payload, func(r Rows) error {
			if (r.Columns != nil) != columns || (r.Columns != nil) == (r.Events != nil) {
				t.Errorf("codec %v: columns %v, events %d", c, r.Columns != nil, len(r.Events))
			}
			n += r.Len()
			return nil
		})
		if err != nil || n != len(ds) {
			t.Errorf("codec %v: %d rows (%v), want %d", c, n, err, len(ds))
		}
	}
	for _, d := range decoders() {
		f(d, CodecArrow, data, true)
		f(d, CodecJSON, jsonl, false)
	}
	if err := NewDecoder().DecodeRows(Codec(9), data, func(Rows) error { return nil }); err == nil {
		t.Error("unknown codec: no error")
	}
	if err := NewDecoder().DecodeRecordRows(nil, func(Rows) error { return nil }); err == nil {
		t.Error("empty record: no error")
	}
}

// columnSets are the sets TestDecodeColumns decodes: each column alone,
// none, all, and the columns of a count by tier, rule and outcome with
// distinct clients.
var columnSets = []ColumnSet{ColumnKind, ColumnTime, ColumnNode, ColumnClientIP, ColumnUserID, ColumnTier,
	ColumnRule, ColumnOutcome, ColumnReason, ColumnStoreLatency, ColumnList, ColumnAction, ColumnDropped,
	ColumnUpstreamLatency, ColumnResponseError, 0, AllColumns,
	ColumnKind | ColumnTier | ColumnRule | ColumnOutcome | ColumnUserID | ColumnClientIP}

// checkEmpty checks that the columns c does not hold read as empty.
func checkEmpty(t *testing.T, c *Columns) {
	t.Helper()
	data, start := c.UserID.Data()
	for col, empty := range map[ColumnSet]bool{
		ColumnKind:            c.Kind == nil,
		ColumnOutcome:         c.Outcome == nil,
		ColumnTime:            len(c.Times(nil)) == 0,
		ColumnClientIP:        c.ClientIP == nil && c.ClientIPFamily == nil && c.ClientIPZone.Values == nil,
		ColumnNode:            c.Node.Values == nil && len(c.Node.Indices(nil, c.Len)) == 0,
		ColumnTier:            c.Tier.Values == nil,
		ColumnRule:            c.Rule.Values == nil,
		ColumnReason:          c.Reason.Values == nil,
		ColumnResponseError:   c.ResponseError.Values == nil,
		ColumnList:            c.List.Values == nil,
		ColumnAction:          c.Action.Values == nil,
		ColumnUserID:          data == nil && start == nil,
		ColumnStoreLatency:    c.StoreLatency.b == nil && c.StoreLatency.w == 0,
		ColumnUpstreamLatency: c.UpstreamLatency.b == nil && c.UpstreamLatency.w == 0,
		ColumnDropped:         c.Dropped.b == nil && c.Dropped.w == 0,
	} {
		if !c.Decoded.Has(col) && !empty {
			t.Errorf("set %#x: column %#x not decoded, yet not empty", c.Decoded, col)
		}
	}
}

// TestDecodeColumnSetSkips: under body compression the buffers of the
// columns left out are not decompressed: the kind alone is one buffer
// (its values; a column without nulls has an empty validity buffer), and
// the count's columns fewer than all.
func TestDecodeColumnSetSkips(t *testing.T) {
	for _, c := range []Compression{Zstd, LZ4} {
		data, err := Encode(nil, generate(8, 3072), Options{Compression: c})
		if err != nil {
			t.Fatal(err)
		}
		inflated := func(set ColumnSet) int {
			d := NewDecoder()
			if err := d.DecodeColumnSet(data, set, func(*Columns) error { return nil }); err != nil {
				t.Fatal(err)
			}
			return d.inflated
		}
		all, query, kind := inflated(AllColumns), inflated(columnSets[len(columnSets)-1]), inflated(ColumnKind)
		if kind != 1 || query >= all || all < 17 {
			t.Errorf("%v: buffers decompressed: %d for the kind, %d for the count's columns, %d for all", c, kind, query, all)
		}
		if none := inflated(0); none != 0 {
			t.Errorf("%v: %d buffers decompressed for no column", c, none)
		}
	}
}

// TestDecodeColumnSetCorrupt: a corrupt batch is refused whatever the set,
// bytes of columns left out included (the checksum covers them), and the
// callback is not called.
func TestDecodeColumnSetCorrupt(t *testing.T) {
	for _, c := range []Compression{Zstd, ZstdDict} {
		data, err := Encode(nil, generate(9, 3072), Options{Compression: c})
		if err != nil {
			t.Fatal(err)
		}
		d := NewDecoder()
		for at := 0; at < len(data); at += len(data)/64 + 1 {
			corrupt := append([]byte(nil), data...)
			corrupt[at] ^= 0x5a
			for _, set := range []ColumnSet{ColumnKind, 0} {
				called := false
				if err := d.DecodeColumnSet(corrupt, set, func(*Columns) error { called = true; return nil }); err == nil || called {
					t.Errorf("%v, byte %d flipped, set %#x: err %v, called %v", c, at, set, err, called)
				}
			}
		}
		if err := d.DecodeColumnSet(data, ColumnKind, func(*Columns) error { return nil }); err != nil {
			t.Errorf("%v, after errors: %v", c, err)
		}
	}
}
