// Package canonpath gives a request path one canonical form, so that the
// edge matches rules on the path an origin will serve and not on the
// spelling a client chose, and matches path prefixes on that form.
//
// The canonical form of a path (Clean) is the percent-encoded path with
//   - percent-encoded unreserved characters (A-Z a-z 0-9 - . _ ~) decoded,
//     other escapes written with upper-case hex digits, and bytes that may
//     not appear raw in a path (non-ASCII, space, quotes, brackets...)
//     percent-encoded;
//   - a backslash read as a slash, repeated slashes merged, and "." and ".."
//     segments resolved (RFC 3986 section 5.2.4; ".." never climbs above
//     the root); a trailing slash is kept.
//
// Letter case is kept: whether case matters is a property of the origin,
// and so an option of matching (HasPrefix), not of the form.
//
// What origins read in too many ways to have a canonical form is an error:
// an encoded slash or backslash (%2F, %5C), a control character raw or
// encoded (NUL included), double encoding (%25 followed by two hex digits),
// an invalid escape, bytes that are not UTF-8 (overlong forms included), a
// path parameter on an empty or dot segment ("..;", as Tomcat reads it), a
// path that does not start with "/" and a path longer than MaxLen bytes,
// as sent or once canonical (escaping makes a byte three).
//
// Clean does not allocate when the path is canonical already. Everything
// in the package is safe for concurrent use.
package canonpath

import "errors"

// MaxLen is the longest path Clean accepts, in bytes as sent and in its
// canonical form.
const MaxLen = 8 << 10

// The errors of Clean: the reasons a path has no canonical form. Their
// texts are constant, so that a caller may record them without allocating.
var (
	ErrNotAbsolute    = errors.New("path does not start with /")
	ErrTooLong        = errors.New("path longer than 8 KiB")
	ErrBadEscape      = errors.New("path has an invalid percent escape")
	ErrEncodedSlash   = errors.New("path has an encoded slash or backslash")
	ErrControl        = errors.New("path has a control character")
	ErrDoubleEncoding = errors.New("path is percent-encoded twice")
	ErrInvalidUTF8    = errors.New("path is not UTF-8")
	ErrSegmentParam   = errors.New("path has a parameter on an empty or dot segment")
)

// Form says how far a path was from its canonical form.
type Form uint8

const (
	// Canonical: the path is its canonical form.
	Canonical Form = iota
	// Encoded: the path differs from its canonical form only in how
	// characters are encoded (hex case, raw non-ASCII, encoded unreserved
	// characters); every origin reads the two alike.
	Encoded
	// Ambiguous: the path has dot segments, repeated slashes or
	// backslashes, which origins resolve differently (or not at all).
	Ambiguous
)

// String returns the form's name.
func (f Form) String() string {
	switch f {
	case Canonical:
		return "canonical"
	case Encoded:
		return "encoded"
	}
	return "ambiguous"
}

const upperHex = "0123456789ABCDEF"

// Clean returns the canonical form of p, the path of a request target as
// sent (still percent-encoded, without the query), and how far p was from
// it. It returns p itself, without allocating, when p is canonical.
func Clean(p string) (string, Form, error) {
	path, form, _, err := CleanPlain(p)
	return path, form, err
}

// CleanPlain is Clean that also reports Plain of the canonical path, for a
// caller that matches it against prefixes: for the common path, canonical
// and plain, the one pass over p tells both.
func CleanPlain(p string) (path string, form Form, plain bool, err error) {
	if len(p) > MaxLen {
		return "", 0, false, ErrTooLong
	}
	if p == "" || p[0] != '/' {
		return "", 0, false, ErrNotAbsolute
	}
	if ok, plain := plainCanonical(p); ok {
		return p, Canonical, plain, nil
	}
	path, form, err = clean(p)
	return path, form, err == nil && Plain(path), err
}

// clean is Clean past the checks and the common case.
func clean(p string) (string, Form, error) {
	out := output{p: p, n: 1}
	form := Canonical
	var u utf8State
	seg := out.n // where the current segment starts in out
	for i := 1; ; {
		if i == len(p) || p[i] == '/' || p[i] == '\\' {
			if u.need > 0 {
				return "", 0, ErrInvalidUTF8
			}
			end := i == len(p)
			if !end && p[i] == '\\' {
				form = Ambiguous
			}
			name := seg
			for name < out.n && out.at(name) != ';' {
				name++
			}
			params := name < out.n
			dot := out.dots(seg, name)
			switch {
			case params && (name == seg || dot > 0):
				return "", 0, ErrSegmentParam
			case dot > 0:
				form = Ambiguous
				out.truncate(seg)
				if dot == 2 && seg > 1 {
					j := seg - 2
					for out.at(j) != '/' {
						j--
					}
					out.truncate(j + 1)
				}
			case out.n == seg:
				if !end {
					form = Ambiguous // a repeated slash
				}
			default:
				if !end {
					out.add('/')
				}
			}
			if end {
				break
			}
			i++
			seg = out.n
			continue
		}
		c := p[i]
		switch {
		case c == '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return "", 0, ErrBadEscape
			}
			b := unhex(p[i+1])<<4 | unhex(p[i+2])
			switch {
			case isUnreserved(b):
				if u.need > 0 {
					return "", 0, ErrInvalidUTF8
				}
				out.add(b)
				form = max(form, Encoded)
			case b == '/' || b == '\\':
				return "", 0, ErrEncodedSlash
			case b < 0x20 || b == 0x7f:
				return "", 0, ErrControl
			default:
				if !u.next(b) {
					return "", 0, ErrInvalidUTF8
				}
				out.escape(b)
			}
			i += 3
		case c < 0x20 || c == 0x7f:
			return "", 0, ErrControl
		default:
			if !u.next(c) {
				return "", 0, ErrInvalidUTF8
			}
			if isPathChar(c) {
				out.add(c)
			} else {
				out.escape(c)
			}
			i++
		}
	}
	if out.doubleEncoded() {
		return "", 0, ErrDoubleEncoding
	}
	if out.buf == nil {
		if out.n == len(p) {
			return p, Canonical, nil
		}
		return p[:out.n], max(form, Encoded), nil
	}
	if len(out.buf) > MaxLen {
		// Escaping grew it past what Clean accepts: its canonical form
		// would not be its own canonical form.
		return "", 0, ErrTooLong
	}
	return string(out.buf), max(form, Encoded), nil
}

// plainCanonical reports whether p, which starts with "/", is canonical
// and made only of plain characters: the common case, told in one pass
// over a table. What it cannot tell (escapes, parameters, non-ASCII) the
// full pass of Clean does. When p is, lower reports Plain(p).
func plainCanonical(p string) (ok, lower bool) {
	seg := 1
	all := byte(plainByte | plainLower)
	for i := 1; i < len(p); i++ {
		c := p[i]
		if c == '/' {
			if i == seg || p[seg] == '.' && isDotSegment(p[seg:i]) {
				return false, false
			}
			seg = i + 1
			continue
		}
		f := plain[c]
		if f&plainByte == 0 {
			return false, false
		}
		all &= f
	}
	if isDotSegment(p[seg:]) {
		return false, false
	}
	return true, all&plainLower != 0
}

func isDotSegment(s string) bool { return s == "." || s == ".." }

// plain marks the bytes a canonical path holds raw that need no second
// look (plainByte): pchar but for ";" (segment parameters have rules of
// their own); and of those, the bytes Plain accepts (plainLower): not
// "%" nor an upper-case letter.
var plain = func() (t [256]byte) {
	for c := range 256 {
		if isPathChar(byte(c)) && c != ';' {
			t[c] = plainByte
			if c != '%' && (c < 'A' || c > 'Z') {
				t[c] |= plainLower
			}
		}
	}
	return t
}()

const (
	plainByte  = 1 << iota // held raw by a canonical path
	plainLower             // and accepted by Plain
)

// output is the canonical path being written. While it is a prefix of the
// input it is only a length: a canonical path is not copied.
type output struct {
	p   string
	n   int
	buf []byte // nil while the output is p[:n]
}

func (o *output) add(c byte) {
	if o.buf == nil {
		if o.n < len(o.p) && o.p[o.n] == c {
			o.n++
			return
		}
		o.buf = make([]byte, o.n, max(2*len(o.p), 64))
		copy(o.buf, o.p)
	}
	o.buf = append(o.buf, c)
	o.n++
}

func (o *output) escape(c byte) {
	o.add('%')
	o.add(upperHex[c>>4])
	o.add(upperHex[c&15])
}

func (o *output) at(i int) byte {
	if o.buf == nil {
		return o.p[i]
	}
	return o.buf[i]
}

func (o *output) truncate(n int) {
	o.n = n
	if o.buf != nil {
		o.buf = o.buf[:n]
	}
}

// dots reports 1 when out[from:to] is ".", 2 when it is ".." and else 0.
func (o *output) dots(from, to int) int {
	switch {
	case to-from == 1 && o.at(from) == '.':
		return 1
	case to-from == 2 && o.at(from) == '.' && o.at(from+1) == '.':
		return 2
	}
	return 0
}

// doubleEncoded reports whether the output holds an encoded "%" followed
// by two hex digits: a path an origin that decodes twice reads otherwise.
func (o *output) doubleEncoded() bool {
	for i := 0; i+4 < o.n; i++ {
		if o.at(i) == '%' && o.at(i+1) == '2' && o.at(i+2) == '5' && isHex(o.at(i+3)) && isHex(o.at(i+4)) {
			return true
		}
	}
	return false
}

// isUnreserved reports whether c is an RFC 3986 unreserved character.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// isPathChar reports whether c may appear raw in a path segment: an
// unreserved character, a sub-delimiter, ":" or "@" (RFC 3986 pchar).
func isPathChar(c byte) bool {
	if isUnreserved(c) {
		return true
	}
	switch c {
	case '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@':
		return true
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// utf8State validates UTF-8 one byte at a time, across raw and encoded
// bytes: the shortest form only, no surrogates, nothing above U+10FFFF.
type utf8State struct {
	need   int8 // continuation bytes still expected
	lo, hi byte // range of the next continuation byte
}

// next takes one byte and reports whether the text is still valid.
func (u *utf8State) next(b byte) bool {
	if b < 0x80 {
		return u.need == 0
	}
	if u.need > 0 {
		if b < u.lo || b > u.hi {
			return false
		}
		u.need--
		u.lo, u.hi = 0x80, 0xBF
		return true
	}
	u.lo, u.hi = 0x80, 0xBF
	switch {
	case 0xC2 <= b && b <= 0xDF:
		u.need = 1
	case b == 0xE0:
		u.need, u.lo = 2, 0xA0
	case 0xE1 <= b && b <= 0xEF:
		u.need = 2
		if b == 0xED {
			u.hi = 0x9F
		}
	case b == 0xF0:
		u.need, u.lo = 3, 0x90
	case 0xF1 <= b && b <= 0xF3:
		u.need = 3
	case b == 0xF4:
		u.need, u.hi = 3, 0x8F
	default:
		return false
	}
	return true
}
