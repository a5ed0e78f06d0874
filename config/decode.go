package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Bounds on what Parse reads.
const (
	// MaxFileSize is the largest configuration file Parse accepts.
	MaxFileSize = 1 << 20
	// maxNodes bounds the YAML nodes visited while decoding, counting every
	// expansion of an alias, so that aliases cannot multiply the work.
	maxNodes = 1 << 20
	// maxValueLen bounds how much of a value an error message quotes.
	maxValueLen = 64
)

// Load reads the configuration file at path, decodes it strictly, fills the
// defaults and validates it. Its errors name the file and line; a decoding
// or validation error is an ErrorList holding both kinds at once, except
// that a key that failed to decode is not validated as well.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	// One byte more than allowed tells parse the file is too large.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return load(data, path)
}

// load is Load after reading the file.
func load(data []byte, file string) (*Config, error) {
	c, d := parse(data, file)
	if c == nil {
		return nil, d.err()
	}
	c.Defaults()
	v := c.validate()
	for _, e := range v.errs {
		// A value that failed to decode was left zero: validating it would
		// report the same key twice.
		if !d.failedWithin(e.Key) {
			d.add(e)
		}
	}
	d.dropped += v.dropped
	if err := d.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// failedWithin reports whether key path k, or a key path it lies under,
// failed to decode.
func (d *decoder) failedWithin(k string) bool {
	for i := range len(k) {
		if (k[i] == '.' || k[i] == '[') && d.failed[k[:i]] {
			return true
		}
	}
	return d.failed[k]
}

// Parse decodes one YAML document strictly: unknown keys, duplicate keys,
// values of the wrong type, durations that time.ParseDuration rejects and
// merge keys (<<) are errors. Aliases are followed. file names the source in
// error messages. Parse neither fills defaults nor validates ranges; call
// Defaults then Validate, or use Load. Its error is an ErrorList of every
// problem found, ordered by line.
func Parse(data []byte, file string) (*Config, error) {
	c, d := parse(data, file)
	if err := d.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// parse decodes data as far as it can. The configuration is nil when the
// file could not be read as YAML at all; otherwise it holds every value that
// decoded, and the collector the errors of those that did not.
func parse(data []byte, file string) (*Config, *decoder) {
	d := &decoder{collector: collector{file: file}, lines: make(map[string]int), nulls: make(map[string]bool), failed: make(map[string]bool), budget: maxNodes}
	if len(data) > MaxFileSize {
		d.add(&Error{Problem: "file is larger than " + strconv.Itoa(MaxFileSize>>20) + " MiB"})
		return nil, d
	}
	c := &Config{file: file, lines: d.lines, nulls: d.nulls}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	switch err := dec.Decode(&root); {
	case errors.Is(err, io.EOF):
		// An empty file is an empty configuration; Validate says what it lacks.
	case err != nil:
		d.syntax(err)
		return nil, d
	default:
		d.decode(&root, reflect.ValueOf(c).Elem(), "")
		var next yaml.Node
		switch err := dec.Decode(&next); {
		case errors.Is(err, io.EOF):
		case err != nil:
			d.syntax(err)
		default:
			d.add(&Error{Line: next.Line, Problem: "starts a second YAML document", Allowed: "one document per file"})
		}
	}
	return c, d
}

// decoder walks a yaml.Node tree into a value by reflection, following the
// yaml tags of struct fields, recording the line of every key and collecting
// every error rather than stopping at the first.
type decoder struct {
	collector
	lines  map[string]int
	nulls  map[string]bool // key paths written with a null value (key: or key: null)
	budget int
	failed map[string]bool // key paths whose values failed to decode and were left zero
}

// fail reports a value that could not be decoded.
func (d *decoder) fail(e *Error) {
	d.failed[e.Key] = true
	d.add(e)
}

var durationType = reflect.TypeFor[time.Duration]()

// syntax turns an error of the YAML parser, "yaml: line 3: could not find
// expected ':'", into an Error on that line.
func (d *decoder) syntax(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, after, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				line, msg = n, after
			}
		}
	}
	d.add(&Error{Line: line, Problem: "invalid YAML: " + msg})
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	d.budget--
	if d.budget < 0 {
		if d.budget == -1 {
			d.fail(&Error{Line: n.Line, Key: path, Problem: "document is too large once its aliases are expanded",
				Allowed: "fewer aliases or a smaller file"})
		}
		return
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) > 0 {
			d.decode(n.Content[0], v, path)
		}
		return
	case yaml.AliasNode:
		if n.Alias != nil {
			d.decode(n.Alias, v, path)
		}
		return
	}
	if n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		// An absent value leaves the field at its zero value, which Defaults
		// fills or Validate reports. A struct is already zero, except the
		// root Config, whose file and lines must survive.
		if path != "" {
			d.nulls[path] = true
		}
		if v.Kind() != reflect.Struct {
			v.SetZero()
		}
		return
	}
	t := v.Type()
	if t == durationType {
		d.duration(n, v, path)
		return
	}
	if v.CanAddr() {
		if c, ok := v.Addr().Interface().(choice); ok {
			d.choice(n, c, path)
			return
		}
	}
	switch t.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.structure(n, v, path)
	case reflect.Map:
		d.mapping(n, v, path)
	case reflect.Slice:
		d.sequence(n, v, path)
	case reflect.String:
		switch n.ShortTag() {
		case "!!str", "!!int", "!!float", "!!timestamp":
			v.SetString(n.Value)
		default:
			d.typeError(n, path, "a string", "a quoted string such as \"true\"")
		}
	case reflect.Int, reflect.Int64:
		var i int64
		if n.ShortTag() != "!!int" {
			d.typeError(n, path, "an integer", "a whole number such as 60")
		} else if err := n.Decode(&i); err != nil || v.OverflowInt(i) {
			d.fail(&Error{Line: n.Line, Key: path, Value: quoted(n.Value), Problem: "is out of range", Allowed: "a smaller whole number"})
		} else {
			v.SetInt(i)
		}
	case reflect.Float64:
		var f float64
		if tag := n.ShortTag(); tag != "!!int" && tag != "!!float" {
			d.typeError(n, path, "a number", "a number such as 2 or 1.5")
		} else if err := n.Decode(&f); err != nil {
			d.fail(&Error{Line: n.Line, Key: path, Value: quoted(n.Value), Problem: "is out of range", Allowed: "a smaller number"})
		} else {
			v.SetFloat(f)
		}
	case reflect.Bool:
		var b bool
		if n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
			d.typeError(n, path, "a boolean", "true or false")
		} else {
			v.SetBool(b)
		}
	default:
		// Only reached if the schema gains a field of a kind this decoder
		// does not know; TestFullExample catches that.
		d.fail(&Error{Line: n.Line, Key: path, Problem: "cannot be decoded into " + t.String()})
	}
}

// choice is a value that names one of a few choices, owned by the package
// whose behaviour it selects (seglog.SyncMode, canonpath.Case) or, where
// that package is the edge's, by the leaf it aliases (limitspec.Clock is
// redisstore.Clock): the configuration is decoded into it once, and nobody
// maps a string again. Its zero value is the default.
type choice interface {
	UnmarshalText([]byte) error
	Choices() []string
}

func (d *decoder) choice(n *yaml.Node, c choice, path string) {
	allowed := "one of " + strings.Join(c.Choices(), ", ")
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		d.typeError(n, path, "a string", allowed)
		return
	}
	if err := c.UnmarshalText([]byte(n.Value)); err != nil {
		d.fail(&Error{Line: n.Line, Key: path, Value: quoted(n.Value), Problem: "is not allowed", Allowed: allowed})
	}
}

func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string) {
	const allowed = "a duration such as 30s, 1m or 1h30m"
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		d.typeError(n, path, "a duration", allowed)
		return
	}
	dur, err := time.ParseDuration(n.Value)
	if err != nil {
		d.fail(&Error{Line: n.Line, Key: path, Value: quoted(n.Value), Problem: "is not a duration", Allowed: allowed})
		return
	}
	v.SetInt(int64(dur))
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) {
	fields := fieldsOf(v.Type())
	if n.Kind != yaml.MappingNode {
		d.typeError(n, path, "a mapping", "a mapping with keys "+fields.names())
		return
	}
	d.pairs(n, path, func(key *yaml.Node, keyPath string, val *yaml.Node) {
		i, ok := fields.find(key.Value)
		if !ok {
			d.add(&Error{Line: key.Line, Key: keyPath, Problem: "unknown key", Allowed: "one of " + fields.names()})
			return
		}
		d.decode(val, v.Field(i), keyPath)
	})
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	t := v.Type()
	if n.Kind != yaml.MappingNode {
		d.typeError(n, path, "a mapping", "a mapping of names to values")
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(t))
	}
	d.pairs(n, path, func(key *yaml.Node, keyPath string, val *yaml.Node) {
		// A key with no value ("free:") is an empty entry, not a missing
		// one, so that Validate can say what the entry lacks.
		elem := reflect.New(t.Elem()).Elem()
		if t.Elem().Kind() == reflect.Pointer {
			elem.Set(reflect.New(t.Elem().Elem()))
			d.decode(val, elem.Elem(), keyPath)
		} else {
			d.decode(val, elem, keyPath)
		}
		v.SetMapIndex(reflect.ValueOf(key.Value).Convert(t.Key()), elem)
	})
}

// pairs calls f for each key of a mapping node that is a scalar seen once,
// after recording its line; it reports the other keys.
func (d *decoder) pairs(n *yaml.Node, path string, f func(key *yaml.Node, keyPath string, val *yaml.Node)) {
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		if key.Kind == yaml.AliasNode && key.Alias != nil {
			key = key.Alias
		}
		if key.Kind != yaml.ScalarNode {
			d.add(&Error{Line: key.Line, Key: path, Problem: "has a key that is " + kindName(key), Allowed: "a plain name as key"})
			continue
		}
		keyPath := joinKey(path, key.Value)
		if key.ShortTag() == "!!merge" {
			d.add(&Error{Line: key.Line, Key: keyPath, Problem: "merge keys are not supported", Allowed: "an alias as the whole value (key: *anchor) or write the keys out"})
			continue
		}
		if first, dup := seen[key.Value]; dup {
			d.add(&Error{Line: key.Line, Key: keyPath, Problem: "duplicate key (first on line " + strconv.Itoa(first) + ")", Allowed: "each key once"})
			continue
		}
		seen[key.Value] = key.Line
		if _, ok := d.lines[keyPath]; !ok {
			d.lines[keyPath] = key.Line
		}
		f(key, keyPath, val)
	}
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.typeError(n, path, "a list", "a list such as [a, b] or one \"- item\" per line")
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		p := indexKey(path, i)
		if _, ok := d.lines[p]; !ok {
			d.lines[p] = item.Line
		}
		d.decode(item, s.Index(i), p)
	}
	v.Set(s)
}

// typeError reports a value of the wrong kind or type; want reads after
// "is not", allowed after "use".
func (d *decoder) typeError(n *yaml.Node, path, want, allowed string) {
	e := &Error{Line: n.Line, Key: path, Allowed: allowed}
	if n.Kind == yaml.ScalarNode {
		e.Value = quoted(n.Value)
		e.Problem = "is not " + want
	} else {
		e.Problem = "is " + kindName(n) + ", not " + want
	}
	d.fail(e)
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return "a scalar"
}

// quoted shortens a value for an error message.
func quoted(s string) string {
	if len(s) <= maxValueLen {
		return s
	}
	cut := maxValueLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// joinKey and indexKey build key paths: tiers.anonymous.global.limit,
// fail_closed[1].
func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func indexKey(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// fieldList is a struct's yaml fields in declaration order.
type fieldList []struct {
	name  string
	index int
}

func fieldsOf(t reflect.Type) fieldList {
	var fs fieldList
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		fs = append(fs, struct {
			name  string
			index int
		}{name, i})
	}
	return fs
}

func (fs fieldList) find(name string) (int, bool) {
	for _, f := range fs {
		if f.name == name {
			return f.index, true
		}
	}
	return 0, false
}

func (fs fieldList) names() string {
	var b strings.Builder
	for i, f := range fs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(f.name)
	}
	return b.String()
}
