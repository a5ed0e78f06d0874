package columnar

import (
	"slices"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestDecodePayload: every codec through the one dispatch, framed (a
// Kinesis record) and bare (a log record).
func TestDecodePayload(t *testing.T) {
	ds := generate(11, 5)
	arrow, err := Encode(nil, ds, Options{Compression: ZstdDict})
	if err != nil {
		t.Fatal(err)
	}
	var lines []byte
	for i := range ds {
		lines = append(decisions.AppendJSON(lines, &ds[i]), '\n')
	}
	one := decisions.AppendJSON(nil, &ds[0])
	f := func(name string, c Codec, payload []byte, want []decisions.Decision) {
		t.Run(name, func(t *testing.T) {
			got, err := NewDecoder().DecodePayload(c, payload, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkSame(t, got, want)
			got, err = DecodeRecord(append([]byte{byte(c)}, payload...), nil)
			if err != nil {
				t.Fatal(err)
			}
			checkSame(t, got, want)
		})
	}
	f("arrow", CodecArrow, arrow, ds)
	f("json_lines", CodecJSON, lines, ds)
	f("json_last_line_open", CodecJSON, lines[:len(lines)-1], ds)
	f("json_one", CodecJSON, one, ds[:1])
}

func TestDecodePayloadErrors(t *testing.T) {
	good := decisions.AppendJSON(nil, &generate(12, 1)[0])
	cases := []struct {
		name string
		data []byte // codec byte, then payload
		want string
	}{
		{"empty record", nil, "decode record: empty"},
		{"unknown codec", []byte{3, '{', '}'}, "decode record: unknown codec 3"},
		{"codec zero", []byte{0}, "decode record: unknown codec 0"},
		{"empty arrow", []byte{1}, "decode record: "},
		{"bad arrow", []byte{1, 1, 2, 3}, "decode record: "},
		{"empty json", []byte{2}, "decode record: empty JSON payload"},
		{"bad json", []byte{2, '{'}, "decode record: parse decision: "},
		{"blank json line", slices.Concat([]byte{2}, good, []byte("\n\n"), good), "decode record: parse decision: "},
		{"bad second json line", slices.Concat([]byte{2}, good, []byte("\n{}")), "decode record: parse decision: "},
		{"json time past 2262", slices.Concat([]byte{2}, good, []byte("\n"+`{"v":2,"time":"9999-12-31T23:59:59Z","outcome":"allow"}`)), "decode record: parse decision: time 9999-12-31T23:59:59Z is outside"},
		{"json user id past the cap", slices.Concat([]byte{2}, []byte(`{"v":2,"time":"2026-11-30T03:00:00Z","outcome":"allow","user_id":"`+strings.Repeat("u", 257)+`"}`)), "decode record: parse decision: user_id of 257 bytes"},
	}
	for _, c := range cases {
		dst := []decisions.Decision{{RequestID: "kept"}}
		got, err := NewDecoder().DecodeRecord(c.data, dst)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one starting %q", c.name, err, c.want)
		}
		if len(got) != 1 || got[0].RequestID != "kept" {
			t.Errorf("%s: dst became %d events, want it unchanged", c.name, len(got))
		}
	}
}

func TestCodecText(t *testing.T) {
	for _, name := range CodecChoices {
		var c Codec
		if err := c.UnmarshalText([]byte(name)); err != nil || c.String() != name {
			t.Errorf("UnmarshalText(%q) = %v, %v; want the codec named %q", name, c, err, name)
		}
	}
	for _, bad := range []string{"", "Arrow", "1", "parquet"} {
		c := CodecJSON
		if err := c.UnmarshalText([]byte(bad)); err == nil || c != CodecJSON {
			t.Errorf("UnmarshalText(%q) = %v, %v; want an error and no change", bad, c, err)
		}
	}
}

func TestCodecString(t *testing.T) {
	for c, want := range map[Codec]string{CodecArrow: "arrow", CodecJSON: "json", 0: "codec 0", 9: "codec 9"} {
		if got := c.String(); got != want {
			t.Errorf("Codec(%d).String() = %q, want %q", uint8(c), got, want)
		}
	}
}

// FuzzDecodeRecord: any record data decodes or fails without a panic, and
// a failure leaves dst as it was.
func FuzzDecodeRecord(f *testing.F) {
	ds := generate(13, 3)
	arrow, err := Encode([]byte{byte(CodecArrow)}, ds, Options{Compression: ZstdDict})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(arrow)
	f.Add(decisions.AppendJSON([]byte{byte(CodecJSON)}, &ds[0]))
	f.Add([]byte{2, '\n'})
	f.Add(logsRecord(f, "DATA_MESSAGE", lambdaLine(string(decisions.AppendJSON(nil, &ds[1]))), "START RequestId: x"))
	f.Add(logsRecord(f, "CONTROL_MESSAGE"))
	dec := NewDecoder()
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := dec.DecodeRecord(data, nil)
		if _, partial := IsCorruptEvents(err); err != nil && !partial && len(got) != 0 {
			t.Fatalf("failed with %d events appended: %v", len(got), err)
		}
	})
}
