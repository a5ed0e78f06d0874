package jsonstr

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestAppend(t *testing.T) {
	cases := []struct{ in, plain, jsSafe string }{
		{"", `""`, `""`},
		{"plain /path?q=1&x=<y>", `"plain /path?q=1&x=<y>"`, `"plain /path?q=1&x=<y>"`},
		{`a"b\c`, `"a\"b\\c"`, `"a\"b\\c"`},
		{"\n\r\t", `"\n\r\t"`, `"\n\r\t"`},
		{"\x00\x01\b\f\x1f\x7f", `"\u0000\u0001\u0008\u000c\u001f` + "\x7f" + `"`, `"\u0000\u0001\u0008\u000c\u001f` + "\x7f" + `"`},
		{"Köln 東京 😀", `"Köln 東京 😀"`, `"Köln 東京 😀"`},
		{"a\u2028b\u2029c", "\"a\u2028b\u2029c\"", `"a\u2028b\u2029c"`},
		{"bad \xff\xfe end", `"bad \ufffd\ufffd end"`, `"bad \ufffd\ufffd end"`},
		{"cut \xe6\x9d", `"cut \ufffd\ufffd"`, `"cut \ufffd\ufffd"`},
		{"\xed\xa0\x80", `"\ufffd\ufffd\ufffd"`, `"\ufffd\ufffd\ufffd"`}, // a surrogate is not UTF-8
	}
	for _, c := range cases {
		if got := string(Append(nil, c.in)); got != c.plain {
			t.Errorf("Append(%q) = %s, want %s", c.in, got, c.plain)
		}
		if got := string(AppendJSSafe(nil, c.in)); got != c.jsSafe {
			t.Errorf("AppendJSSafe(%q) = %s, want %s", c.in, got, c.jsSafe)
		}
	}
	if got := string(Append([]byte("x:"), "y")); got != `x:"y"` {
		t.Errorf("Append to a prefix = %s, want x:\"y\"", got)
	}
}

// FuzzAppend checks both functions against encoding/json: the output is
// valid JSON that decodes to what encoding/json's does, and its bytes are
// encoding/json's (HTML escaping off) but for the documented differences.
func FuzzAppend(f *testing.F) {
	for _, s := range []string{"", "abc", `"\`, "\x00\b\f\n\r\t\x1f", "\u2028\u2029", "\xff", "é\xc3", "<&>", "😀\xf0\x9f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var ref bytes.Buffer
		enc := json.NewEncoder(&ref)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		want := bytes.TrimSuffix(ref.Bytes(), []byte("\n"))
		var wantVal string
		if err := json.Unmarshal(want, &wantVal); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name     string
			got      []byte
			lineSeps bool
		}{
			{"Append", Append(nil, s), false},
			{"AppendJSSafe", AppendJSSafe(nil, s), true},
		} {
			if !json.Valid(c.got) || !utf8.Valid(c.got) {
				t.Fatalf("%s(%q) = %s: not valid JSON", c.name, s, c.got)
			}
			var got string
			if err := json.Unmarshal(c.got, &got); err != nil || got != wantVal {
				t.Fatalf("%s(%q) decodes to %q (%v), encoding/json's to %q", c.name, s, got, err, wantVal)
			}
			if w := normalise(want, c.lineSeps); !bytes.Equal(c.got, w) {
				t.Fatalf("%s(%q) = %s, want %s", c.name, s, c.got, w)
			}
		}
	})
}

// normalise rewrites encoding/json's output into this package's: \b and \f
// as \u0008 and \u000c and, unless lineSeps, \u2028 and \u2029 unescaped.
func normalise(js []byte, lineSeps bool) []byte {
	var out []byte
	for i := 0; i < len(js); i++ {
		if js[i] != '\\' {
			out = append(out, js[i])
			continue
		}
		switch e := js[i+1]; {
		case e == 'b':
			out = append(out, `\u0008`...)
		case e == 'f':
			out = append(out, `\u000c`...)
		case e == 'u' && !lineSeps && (string(js[i+2:i+6]) == "2028" || string(js[i+2:i+6]) == "2029"):
			out = utf8.AppendRune(out, rune(0x2020+int(js[i+5]-'0')))
			i += 4
		default:
			out = append(out, '\\', e)
		}
		i++
	}
	return out
}

var benchInputs = []struct{ name, s string }{
	{"ascii", "/api/v1/widgets?page=2&sort=name"},
	{"quotes", `say "hi" \ to	the	world` + "\n"},
	{"utf8", "Grüße aus Köln – 東京 \u2028 ok"},
	{"invalid", "bad \xff\xfe bytes \x01\x1f"},
}

// BenchmarkAppend runs both functions on each input.
func BenchmarkAppend(b *testing.B) {
	for _, fn := range []struct {
		name string
		f    func([]byte, string) []byte
	}{{"plain", Append}, {"js_safe", AppendJSSafe}} {
		for _, in := range benchInputs {
			b.Run(fn.name+"/"+in.name, func(b *testing.B) {
				buf := make([]byte, 0, 256)
				b.ReportAllocs()
				b.SetBytes(int64(len(in.s)))
				for b.Loop() {
					buf = fn.f(buf[:0], in.s)
				}
			})
		}
	}
}
