package canonpath

import "fmt"

// Case says whether letter case distinguishes paths when matching.
type Case uint8

const (
	// Insensitive matches ASCII letters without regard to case, and reads
	// the non-ASCII letters whose case mapping is an ASCII letter (KELVIN
	// SIGN, LATIN SMALL LETTER LONG S, dotless i and dotted capital I) as
	// that letter: case-insensitive origins serve /API/Admin, and some
	// (Unicode case folding) /ap%C4%B1/admin, as /api/admin.
	Insensitive Case = iota
	// Sensitive matches bytes as they are.
	Sensitive
)

// UnmarshalText reads a case policy by its configuration name: insensitive
// or sensitive.
func (c *Case) UnmarshalText(b []byte) error {
	switch string(b) {
	case "insensitive":
		*c = Insensitive
	case "sensitive":
		*c = Sensitive
	default:
		return fmt.Errorf("case %q: want insensitive or sensitive", b)
	}
	return nil
}

// Choices lists the names UnmarshalText accepts, the default first.
func (Case) Choices() []string { return []string{"insensitive", "sensitive"} }

// String returns the case policy's configuration name.
func (c Case) String() string {
	if c == Sensitive {
		return "sensitive"
	}
	return "insensitive"
}

// foldsToASCII are the UTF-8 letters, percent-encoded as in a canonical
// path, whose simple case mapping is an ASCII letter, and that letter.
var foldsToASCII = [...]struct {
	enc    string
	letter byte
}{
	{"%E2%84%AA", 'k'}, // U+212A KELVIN SIGN
	{"%C5%BF", 's'},    // U+017F LATIN SMALL LETTER LONG S
	{"%C4%B1", 'i'},    // U+0131 LATIN SMALL LETTER DOTLESS I
	{"%C4%B0", 'i'},    // U+0130 LATIN CAPITAL LETTER I WITH DOT ABOVE
}

// Fold returns prefix as HasPrefix with Insensitive compares it: ASCII
// letters in lower case. It allocates only when prefix has upper-case
// letters.
func Fold(prefix string) string {
	for i := 0; i < len(prefix); i++ {
		if 'A' <= prefix[i] && prefix[i] <= 'Z' {
			b := []byte(prefix)
			for j := i; j < len(b); j++ {
				b[j] = lower(b[j])
			}
			return string(b)
		}
	}
	return prefix
}

// MatchForm returns the canonical prefix as HasPrefix compares it under c:
// the escapes of delimiters that origins read as the delimiter (delimiter)
// decoded, and with Insensitive folded (Fold). It allocates only when it
// changes prefix.
func MatchForm(prefix string, c Case) string {
	for i := 0; i < len(prefix); i++ {
		if _, ok := delimiter(prefix[i:]); ok {
			b := []byte(prefix[:i])
			for ; i < len(prefix); i++ {
				if d, ok := delimiter(prefix[i:]); ok {
					b = append(b, d)
					i += 2
					continue
				}
				b = append(b, prefix[i])
			}
			prefix = string(b)
			break
		}
	}
	if c == Insensitive {
		return Fold(prefix)
	}
	return prefix
}

// delimiter returns the character that s starts with the escape of, as a
// canonical path writes it (upper-case hex), when that is one a path
// segment may hold raw besides letters, digits and "-._~" (RFC 3986's
// pchar: a sub-delimiter, ":" or "@"), ";" apart. Origins decode their
// escapes (Go's net/http, nginx, Spring), so
// /v1/things%3AbatchGet is /v1/things:batchGet to them, and rules match
// the two alike. ";" is not one: its escape is a character of the segment,
// the raw ";" starts the segment's parameters.
func delimiter(s string) (byte, bool) {
	if len(s) < 3 || s[0] != '%' {
		return 0, false
	}
	switch s[1:3] {
	case "21", "24", "26", "27", "28", "29", "2A", "2B", "2C", "3A", "3D", "40":
		return unhex(s[1])<<4 | unhex(s[2]), true
	}
	return 0, false
}

// HasPrefix reports whether the canonical path p falls under the canonical
// prefix: p starts with prefix, reading each segment without its
// parameters (";" to the end of the segment, which Tomcat, Jetty and Spring
// drop) and an escaped delimiter as the delimiter (delimiter), or p is
// prefix without its trailing slash (a rule for /api/admin/ covers
// /api/admin). The prefix must be in match form (MatchForm). It does not
// allocate.
func HasPrefix(p, prefix string, c Case) bool {
	i, j := 0, 0
	for j < len(prefix) {
		if i == len(p) {
			return j == len(prefix)-1 && prefix[j] == '/'
		}
		b := p[i]
		if b == ';' {
			for i < len(p) && p[i] != '/' {
				i++
			}
			continue
		}
		if b == '%' {
			if d, ok := delimiter(p[i:]); ok && d == prefix[j] {
				i += 3
				j++
				continue
			}
		}
		if c == Insensitive {
			if b == '%' {
				if n := foldedLetter(p[i:], prefix[j]); n > 0 {
					i += n
					j++
					continue
				}
			}
			b = lower(b)
		}
		if b != prefix[j] {
			return false
		}
		i++
		j++
	}
	return true
}

// foldedLetter returns the length of the encoded letter at the start of s
// when it folds to letter, else 0.
func foldedLetter(s string, letter byte) int {
	for _, f := range foldsToASCII {
		if f.letter == letter && len(s) >= len(f.enc) && s[:len(f.enc)] == f.enc {
			return len(f.enc)
		}
	}
	return 0
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// Plain reports whether HasPrefix may compare p byte for byte, as
// HasPlainPrefix does, under either case policy: p has no segment
// parameters (";"), no percent-encoded bytes and no upper-case ASCII
// letters. Most request paths are plain, and a request matched against
// several prefixes checks it once.
func Plain(p string) bool {
	for i := 0; i < len(p); i++ {
		if b := p[i]; b == ';' || b == '%' || ('A' <= b && b <= 'Z') {
			return false
		}
	}
	return true
}

// HasPlainPrefix is HasPrefix for a path p that is Plain, under either
// case policy (with Insensitive, prefix folded as HasPrefix wants it).
func HasPlainPrefix(p, prefix string) bool {
	if len(p) >= len(prefix) {
		return p[:len(prefix)] == prefix
	}
	return len(p) == len(prefix)-1 && prefix[len(p)] == '/' && p == prefix[:len(p)]
}
