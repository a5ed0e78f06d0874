// Package visible shows text that is the client's choice (a user id, a
// path, an alert's summary that names them) where people read it: Hidden
// names the characters that are not drawn but act on the text around them,
// and Escape and Chars write text with those characters escaped, so that it
// can neither start a line, colour or move a terminal's text, nor reorder
// or hide what is shown; AppendJSON writes them as escapes in JSON text,
// whose strings otherwise carry them raw. A report that must keep a
// table's cells shows them as spaces instead. Its functions are safe for
// concurrent use.
package visible

import (
	"iter"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/internal/jsonstr"
)

// Hidden reports whether r is not drawn but acts on the text around it: a
// control character (unicode.Cc: a line break, a tab, the ESC that starts
// a terminal's escape sequence), a format character (unicode.Cf: the
// bidirectional controls such as U+202E, which shows "\u202enimda" as
// "admin", zero-width spaces and joiners) or a line or paragraph separator
// (unicode.Zl, Zp: U+2028, U+2029, which editors, browsers' script and
// some viewers take as a line break).
func Hidden(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}

// Escape returns s with each hidden character (Hidden), each byte that is
// not UTF-8, U+FFFD (which JSON writes for such a byte) and the backslash
// written as strconv.QuoteToASCII writes them (\n, \x1b, \u202e, \u2028,
// \xff, \ufffd, \\), and every other character as it is: the text shows
// as itself, and no two strings are shown alike.
func Escape(s string) string {
	if !strings.ContainsFunc(s, escaped) {
		return s
	}
	var b strings.Builder
	for c := range Chars(s) {
		b.WriteString(c)
	}
	return b.String()
}

// Chars yields s a character at a time as Escape writes it, for a writer
// that cuts what it shows at a whole character.
func Chars(s string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for i := 0; i < len(s); {
			r, size := utf8.DecodeRuneInString(s[i:])
			c := s[i : i+size]
			if escaped(r) {
				c = strconv.QuoteToASCII(c)
				c = c[1 : len(c)-1]
			}
			if !yield(c) {
				return
			}
			i += size
		}
	}
}

// AppendJSON appends the JSON text js to dst with each hidden character
// (Hidden) that JSON encoders write raw, U+007F and above (encoding/json
// escapes only U+2028 and U+2029 of them), written as a \u escape (a
// surrogate pair above U+FFFF), and returns the extended buffer. A
// character outside ASCII can only be inside a string of valid JSON, so
// the text decodes to the same values, and a reader who looks at it (a
// terminal, a browser, an editor) sees every such character as an escape.
func AppendJSON(dst, js []byte) []byte {
	for i := 0; i < len(js); {
		r, size := utf8.DecodeRune(js[i:])
		if r < 0x7f || !Hidden(r) {
			dst = append(dst, js[i:i+size]...)
			i += size
			continue
		}
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			dst = jsonstr.AppendU(dst, r1)
			r = r2
		}
		dst = jsonstr.AppendU(dst, r)
		i += size
	}
	return dst
}

// escaped reports whether Escape writes r as an escape; an invalid byte is
// read as utf8.RuneError.
func escaped(r rune) bool {
	return r == '\\' || r == utf8.RuneError || Hidden(r)
}
