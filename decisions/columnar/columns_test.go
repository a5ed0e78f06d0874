package columnar

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// fromColumns makes events of the fields Columns exposes.
func fromColumns(c *Columns) []decisions.Decision {
	times := c.Times(nil)
	tier, rule := c.Tier.Indices(nil, c.Len), c.Rule.Indices(nil, c.Len)
	out := make([]decisions.Decision, c.Len)
	for i := range out {
		d := &out[i]
		d.Kind, d.Outcome = decisions.Kind(c.Kind[i]), decisions.Outcome(c.Outcome[i])
		if times[i] != NullTime {
			d.Time = time.Unix(0, times[i]).UTC()
		}
		d.Node, d.Tier, d.Rule = c.Node.Values[c.Node.At(i)], c.Tier.Values[tier[i]], c.Rule.Values[rule[i]]
		d.Reason, d.ResponseError = c.Reason.Values[c.Reason.At(i)], c.ResponseError.Values[c.ResponseError.At(i)]
		d.List, d.Action = c.List.Values[c.List.At(i)], c.Action.Values[c.Action.At(i)]
		d.UserID = string(c.UserID.Bytes(i))
		switch c.ClientIPFamily[i] {
		case 4:
			d.ClientIP = netip.AddrFrom16([16]byte(c.ClientIP[16*i:])).Unmap()
		case 6:
			d.ClientIP = netip.AddrFrom16([16]byte(c.ClientIP[16*i:])).WithZone(c.ClientIPZone.Values[c.ClientIPZone.At(i)])
		}
		d.StoreLatency = time.Duration(c.StoreLatency.Int(i))
		d.UpstreamLatency = time.Duration(c.UpstreamLatency.Int(i))
		d.Dropped = c.Dropped.Uint(i)
	}
	return out
}

// exposed keeps the fields of d that Columns exposes.
func exposed(d decisions.Decision) decisions.Decision {
	return decisions.Decision{Kind: d.Kind, Time: d.Time, Node: d.Node, ClientIP: d.ClientIP, UserID: d.UserID,
		Tier: d.Tier, Rule: d.Rule, Outcome: d.Outcome, Reason: d.Reason, StoreLatency: d.StoreLatency,
		UpstreamLatency: d.UpstreamLatency, ResponseError: d.ResponseError, List: d.List, Action: d.Action, Dropped: d.Dropped}
}

// TestDecodeColumns: the columns of every batch, in every compression and
// through both readers, read back the fields Decode gives, edge cases
// (null times, IPv6 zones, every width) and an older writer's batch
// (missing columns read as zero values) included.
func TestDecodeColumns(t *testing.T) {
	f := func(name string, data []byte) {
		t.Helper()
		for dname, d := range decoders() {
			want, err := d.Decode(data, nil)
			if err != nil {
				t.Fatalf("%s, %s: %v", name, dname, err)
			}
			var got []decisions.Decision
			if err := d.DecodeColumns(data, func(c *Columns) error {
				got = append(got, fromColumns(c)...)
				return nil
			}); err != nil {
				t.Fatalf("%s, %s: %v", name, dname, err)
			}
			for i := range want {
				want[i] = exposed(want[i])
			}
			checkSame(t, got, want)
		}
	}
	for _, c := range compressions {
		data, err := Encode(nil, decisiontest.EdgeCases(), Options{Compression: c})
		if err != nil {
			t.Fatal(err)
		}
		f("edge cases, "+c.String(), data)
		data, _ = Encode(nil, generate(3, 3000), Options{Compression: c})
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
