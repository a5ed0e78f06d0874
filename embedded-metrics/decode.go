package emf

import (
	"errors"
	"iter"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is the package's one JSON decoder. Validate checks what it
// decodes, the MetricDataSink converts what it decodes into datums, and the
// LogsSink reads event timestamps from it. It keeps member order and
// repeated members, which encoding/json's maps would hide, and it accepts
// exactly the input encoding/json accepts, decoding strings as it does
// (invalid UTF-8 and lone surrogates become U+FFFD).

// jkind is the type of a JSON value.
type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNumber
	jString
	jArray
	jObject
)

// String names the kind for a message: "a string", "an array".
func (k jkind) String() string {
	return [...]string{"null", "a boolean", "a number", "a string", "an array", "an object"}[k]
}

// jnode is one value of a decoded document. Nodes are stored in document
// order: a container is followed by its contents, an object's members as
// a key node (a string) then a value node.
type jnode struct {
	kind jkind
	esc  bool  // the text is in jdoc.esc, not in jdoc.src
	off  int32 // a string's decoded text or a number's literal: bounds
	end  int32
	next int32 // index of the node after this value and its contents
	n    int32 // elements of an array, members of an object
}

// jdoc is a decoded JSON document. The zero value is ready to decode; a
// jdoc is not safe for concurrent use, and is reused through jdocPool.
type jdoc struct {
	src   string
	esc   string // decoded text of strings that had escapes or invalid UTF-8
	nodes []jnode
	buf   []byte // esc while it is being built
	pos   int    // parse position in src
}

// maxDepth bounds nesting on hostile input; EMF documents nest 5 deep.
const maxDepth = 1000

// errEndOfInput says the document stops inside a value.
var errEndOfInput = errors.New("unexpected end of input")

// decode parses src, one JSON value and nothing else but white space. The
// root, if decoding succeeds, is node 0.
func (d *jdoc) decode(src string) error {
	if len(src) > math.MaxInt32 {
		return errors.New("document of " + strconv.Itoa(len(src)) + " bytes is too large to decode")
	}
	d.src, d.esc, d.nodes, d.buf, d.pos = src, "", d.nodes[:0], d.buf[:0], 0
	d.space()
	if err := d.value(0); err != nil {
		return err
	}
	d.space()
	if d.pos < len(src) {
		return errors.New("data after the top-level value at byte " + strconv.Itoa(d.pos))
	}
	d.esc = string(d.buf)
	return nil
}

func (d *jdoc) space() {
	for d.pos < len(d.src) {
		switch d.src[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// syntax reports the byte at the parse position, or the end of input.
func (d *jdoc) syntax(context string) error {
	if d.pos >= len(d.src) {
		return errEndOfInput
	}
	return errors.New("invalid character " + quoteChar(d.src, d.pos) + ", " + context)
}

func (d *jdoc) value(depth int) error {
	if depth > maxDepth {
		return errors.New("nesting deeper than " + strconv.Itoa(maxDepth) + " levels")
	}
	if d.pos >= len(d.src) {
		return errEndOfInput
	}
	i := int32(len(d.nodes))
	d.nodes = append(d.nodes, jnode{})
	switch c := d.src[d.pos]; {
	case c == '{':
		d.pos++
		if err := d.object(i, depth); err != nil {
			return err
		}
	case c == '[':
		d.pos++
		if err := d.array(i, depth); err != nil {
			return err
		}
	case c == '"':
		if err := d.string(i); err != nil {
			return err
		}
	case c == '-' || c >= '0' && c <= '9':
		if err := d.number(i); err != nil {
			return err
		}
	case c == 't':
		if err := d.literal("true", jBool, i); err != nil {
			return err
		}
	case c == 'f':
		if err := d.literal("false", jBool, i); err != nil {
			return err
		}
	case c == 'n':
		if err := d.literal("null", jNull, i); err != nil {
			return err
		}
	default:
		return d.syntax("looking for beginning of value")
	}
	d.nodes[i].next = int32(len(d.nodes))
	return nil
}

func (d *jdoc) object(i int32, depth int) error {
	d.nodes[i].kind = jObject
	d.space()
	if d.pos < len(d.src) && d.src[d.pos] == '}' {
		d.pos++
		return nil
	}
	for {
		if d.pos >= len(d.src) || d.src[d.pos] != '"' {
			return d.syntax("looking for beginning of object key string")
		}
		k := int32(len(d.nodes))
		d.nodes = append(d.nodes, jnode{})
		if err := d.string(k); err != nil {
			return err
		}
		d.nodes[k].next = k + 1
		d.space()
		if d.pos >= len(d.src) || d.src[d.pos] != ':' {
			return d.syntax("after object key")
		}
		d.pos++
		d.space()
		if err := d.value(depth + 1); err != nil {
			return err
		}
		d.nodes[i].n++
		if more, err := d.separator('}', "after object key:value pair"); !more || err != nil {
			return err
		}
	}
}

func (d *jdoc) array(i int32, depth int) error {
	d.nodes[i].kind = jArray
	d.space()
	if d.pos < len(d.src) && d.src[d.pos] == ']' {
		d.pos++
		return nil
	}
	for {
		if err := d.value(depth + 1); err != nil {
			return err
		}
		d.nodes[i].n++
		if more, err := d.separator(']', "after array element"); !more || err != nil {
			return err
		}
	}
}

// separator reads what follows a member or element: a comma, and reports
// that more follow, or the closing delimiter.
func (d *jdoc) separator(closing byte, context string) (more bool, err error) {
	d.space()
	if d.pos < len(d.src) {
		switch d.src[d.pos] {
		case ',':
			d.pos++
			d.space()
			return true, nil
		case closing:
			d.pos++
			return false, nil
		}
	}
	return false, d.syntax(context)
}

func (d *jdoc) literal(word string, kind jkind, i int32) error {
	start := d.pos
	for j := 0; j < len(word); j++ {
		if d.pos >= len(d.src) || d.src[d.pos] != word[j] {
			return d.syntax("in literal " + word)
		}
		d.pos++
	}
	d.nodes[i] = jnode{kind: kind, off: int32(start), end: int32(d.pos)}
	return nil
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? and keeps
// its text.
func (d *jdoc) number(i int32) error {
	s, start := d.src, d.pos
	if s[d.pos] == '-' {
		d.pos++
	}
	digits := func() bool {
		n := d.pos
		for d.pos < len(s) && s[d.pos] >= '0' && s[d.pos] <= '9' {
			d.pos++
		}
		return d.pos > n
	}
	switch {
	case d.pos < len(s) && s[d.pos] == '0':
		d.pos++
	case !digits():
		return d.syntax("in numeric literal")
	}
	if d.pos < len(s) && s[d.pos] == '.' {
		d.pos++
		if !digits() {
			return d.syntax("after decimal point in numeric literal")
		}
	}
	if d.pos < len(s) && (s[d.pos] == 'e' || s[d.pos] == 'E') {
		d.pos++
		if d.pos < len(s) && (s[d.pos] == '+' || s[d.pos] == '-') {
			d.pos++
		}
		if !digits() {
			return d.syntax("in exponent of numeric literal")
		}
	}
	d.nodes[i] = jnode{kind: jNumber, off: int32(start), end: int32(d.pos)}
	return nil
}

// string scans a string literal. One without escapes or invalid UTF-8 is
// kept as a slice of src; any other is decoded into buf.
func (d *jdoc) string(i int32) error {
	s := d.src
	d.pos++ // the opening quote
	start, plain := d.pos, true
	for {
		if d.pos >= len(s) {
			return errEndOfInput
		}
		c := s[d.pos]
		switch {
		case c == '"':
			end := d.pos
			d.pos++
			if plain {
				d.nodes[i] = jnode{kind: jString, off: int32(start), end: int32(end)}
				return nil
			}
			off := len(d.buf)
			d.buf = unquote(d.buf, s[start:end])
			d.nodes[i] = jnode{kind: jString, esc: true, off: int32(off), end: int32(len(d.buf))}
			return nil
		case c == '\\':
			plain = false
			d.pos++
			if d.pos >= len(s) {
				return errEndOfInput
			}
			switch s[d.pos] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				d.pos++
			case 'u':
				d.pos++
				for range 4 {
					if d.pos >= len(s) {
						return errEndOfInput
					}
					if unhex(s[d.pos]) < 0 {
						return d.syntax("in \\u hexadecimal character escape")
					}
					d.pos++
				}
			default:
				return d.syntax("in string escape code")
			}
		case c < 0x20:
			return d.syntax("in string literal")
		case c < utf8.RuneSelf:
			d.pos++
		default:
			r, size := utf8.DecodeRuneInString(s[d.pos:])
			if r == utf8.RuneError && size == 1 {
				plain = false
			}
			d.pos += size
		}
	}
}

func unhex(c byte) rune {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0')
	case c >= 'a' && c <= 'f':
		return rune(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

// unescape is the byte a one-letter escape stands for.
func unescape(e byte) byte {
	switch e {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return e // '"', '\\' and '/'
}

// unquote appends the decoded text of the string literal body s, already
// checked by jdoc.string, as encoding/json decodes it.
func unquote(dst []byte, s string) []byte {
	u4 := func(s string) rune {
		if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
			return -1
		}
		return unhex(s[2])<<12 | unhex(s[3])<<8 | unhex(s[4])<<4 | unhex(s[5])
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			switch e := s[i+1]; e {
			case 'u':
				r := u4(s[i:])
				i += 6
				if utf16.IsSurrogate(r) {
					if r2 := u4(s[i:]); r2 >= 0 {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							dst = utf8.AppendRune(dst, dec)
							i += 6
							continue
						}
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
			default:
				dst = append(dst, unescape(e))
				i += 2
			}
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
		}
	}
	return dst
}

// text is a string's decoded value, or the literal of a number or boolean.
func (d *jdoc) text(i int32) string {
	n := &d.nodes[i]
	if n.esc {
		return d.esc[n.off:n.end]
	}
	return d.src[n.off:n.end]
}

// member returns the value of the last member of object o called name, as
// CloudWatch reads it.
func (d *jdoc) member(o int32, name string) (int32, bool) {
	found, ok := int32(0), false
	for k := o + 1; k < d.nodes[o].next; k = d.nodes[k+1].next {
		if d.text(k) == name {
			found, ok = k+1, true
		}
	}
	return found, ok
}

// int parses an integer number node.
func (d *jdoc) int(i int32) (int64, error) { return strconv.ParseInt(d.text(i), 10, 64) }

// elems yields the position and node of each element of array a.
func (d *jdoc) elems(a int32) iter.Seq2[int, int32] {
	return func(yield func(int, int32) bool) {
		for i, e := 0, a+1; e < d.nodes[a].next; i, e = i+1, d.nodes[e].next {
			if !yield(i, e) {
				return
			}
		}
	}
}

// keys yields the member names of object o in order, repeats included.
func (d *jdoc) keys(o int32) iter.Seq[string] {
	return func(yield func(string) bool) {
		for k := o + 1; k < d.nodes[o].next; k = d.nodes[k+1].next {
			if !yield(d.text(k)) {
				return
			}
		}
	}
}

// metricValue reads number node i as a metric value, with the fault that
// keeps CloudWatch from accepting it.
func (d *jdoc) metricValue(i int32) (float64, fault) {
	text := d.text(i)
	f, err := strconv.ParseFloat(text, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return 0, fault{"is " + text + ", not a number", allowedValue}
	case math.IsInf(f, 0):
		return 0, fault{"is " + text + ", out of range", allowedValue}
	}
	return f, checkMetricValue(f)
}
