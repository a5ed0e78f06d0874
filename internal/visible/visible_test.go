package visible

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestEscape: what acts on text without being drawn (a line break, a
// terminal's ESC, a bidirectional override, a line or paragraph
// separator, a zero-width space), a byte that is not UTF-8, U+FFFD and the
// backslash are escapes; everything else, other scripts and spaces
// included, is itself.
func TestEscape(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"203.0.113.7", "203.0.113.7"},
		{"", ""},
		{"user:émile 王", "user:émile 王"},
		{"a\nb\r\tc", `a\nb\r\tc`},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"x\u2028y\u2029z", `x\u2028y\u2029z`},
		{"\u202enimda", `\u202enimda`},
		{"zero\u200bwidth\ufeff", `zero\u200bwidth\ufeff`},
		{"bad\xffbyte \ufffd", `bad\xffbyte \ufffd`},
		{`back\slash`, `back\\slash`},
		{"tag\U000e0041", `tag\U000e0041`},
	} {
		if got := Escape(c.in); got != c.want {
			t.Errorf("Escape(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

// TestChars: Chars yields whole characters, an escape as one, and stops
// when told.
func TestChars(t *testing.T) {
	var got []string
	for c := range Chars("a\u202eé\nb") {
		got = append(got, c)
		if c == `\n` {
			break
		}
	}
	if want := []string{"a", `\u202e`, "é", `\n`}; !slices.Equal(got, want) {
		t.Errorf("Chars = %q, want %q", got, want)
	}
}

// TestHidden: the control, format and separator categories are hidden;
// letters, marks, symbols and spaces are not.
func TestHidden(t *testing.T) {
	for _, c := range []struct {
		r    rune
		want bool
	}{
		{'\n', true}, {0x1b, true}, {0x7f, true}, {0x85, true}, {0x9f, true},
		{'\u200e', true}, {'\u202e', true}, {'\u2066', true}, {'\u061c', true}, {'\u200b', true}, {'\ufeff', true},
		{'\u2028', true}, {'\u2029', true},
		{'a', false}, {' ', false}, {'\u00a0', false}, {'\u0301', false}, {'€', false}, {'\ufffd', false},
	} {
		if got := Hidden(c.r); got != c.want {
			t.Errorf("Hidden(%U) = %v, want %v", c.r, got, c.want)
		}
	}
}

// TestAppendJSON: in JSON text, each hidden character that encoding/json
// writes raw (a bidirectional override, a zero-width space, a tag
// character above U+FFFF, DEL and the C1 controls) is a \u escape, and
// the text decodes to the same values; other scripts, U+FFFD and the
// structure are left as they are.
func TestAppendJSON(t *testing.T) {
	values := []string{
		"203.0.113.7",
		"user:\u202etsinimda",
		"zero\u200bwidth\ufeff \u2066x\u2069",
		"tag\U000e0041 and \U0001d173",
		"del\x7f c1\u0085\u009b",
		"x\u2028y\u2029z",
		"user:émile 王 \ufffd",
		"a\nb\x1b[31m",
	}
	js, err := json.MarshalIndent(map[string][]string{"values": values}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got := AppendJSON([]byte("prefix:"), js)
	want := `prefix:{
  "values": [
    "203.0.113.7",
    "user:\u202etsinimda",
    "zero\u200bwidth\ufeff \u2066x\u2069",
    "tag\udb40\udc41 and \ud834\udd73",
    "del\u007f c1\u0085\u009b",
    "x\u2028y\u2029z",
    "user:émile 王 ` + "\ufffd" + `",
    "a\nb\u001b[31m"
  ]
}`
	if string(got) != want {
		t.Errorf("AppendJSON:\n%s\nwant\n%s", got, want)
	}
	var back map[string][]string
	if err := json.Unmarshal(got[len("prefix:"):], &back); err != nil || !slices.Equal(back["values"], values) {
		t.Errorf("AppendJSON's text decodes to %q, %v; want %q", back["values"], err, values)
	}
}
