// Package jsonstr appends strings as JSON string literals without
// reflection or allocation, for the hand-written encoders of decision
// events and EMF documents.
//
// Both functions write valid JSON for any input: invalid UTF-8 becomes
// U+FFFD (one per invalid byte, as encoding/json does); '"' and '\' are
// backslashed; \n, \r and \t are written short and the other control
// characters as \u00XX. They differ only in U+2028 and U+2029, which are
// valid JSON but end a line in JavaScript: AppendJSSafe escapes them, as
// encoding/json does, and Append does not. Neither escapes '<', '>' or
// '&'. Both are safe for concurrent use.
package jsonstr

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// plain holds the bytes written as they are without a look at what
// follows: printable ASCII but '"' and '\\'.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// AppendU appends \uXXXX, the JSON escape of the UTF-16 code unit u, and
// returns the extended buffer.
func AppendU(dst []byte, u rune) []byte {
	return append(dst, '\\', 'u', hexDigits[u>>12&0xf], hexDigits[u>>8&0xf], hexDigits[u>>4&0xf], hexDigits[u&0xf])
}

// Append appends s to dst as a JSON string and returns the extended
// buffer.
func Append(dst []byte, s string) []byte { return appendString(dst, s, false) }

// AppendJSSafe appends s to dst as a JSON string that is also a valid
// JavaScript string (U+2028 and U+2029 escaped) and returns the extended
// buffer. Its output is encoding/json's with HTML escaping off, but for
// \b and \f, written as \u0008 and \u000c.
func AppendJSSafe(dst []byte, s string) []byte { return appendString(dst, s, true) }

func appendString(dst []byte, s string, lineSeps bool) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if plain[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = AppendU(dst, rune(c))
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if (r == '\u2028' || r == '\u2029') && lineSeps {
			dst = append(dst, s[start:i]...)
			dst = AppendU(dst, r)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
