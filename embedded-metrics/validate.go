package emf

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Violation is one way in which a document breaks the embedded metric
// format specification or a CloudWatch limit.
type Violation struct {
	Path    string // JSON path of the offending value, e.g. $._aws.CloudWatchMetrics[0].Namespace
	Problem string // what is wrong, with the value found
	Allowed string // what the specification allows there
}

// String formats v as "path: problem; allowed: what".
func (v Violation) String() string {
	return v.Path + ": " + v.Problem + "; allowed: " + v.Allowed
}

// ValidateOptions adjusts Validate. The zero value checks everything with
// the default size limit.
type ValidateOptions struct {
	// MaxSize is the largest document accepted; zero means
	// DefaultMaxDocumentSize.
	MaxSize ByteSize
	// IgnoreTimestampWindow skips the check that the timestamp lies within
	// MaxTimestampPast before and MaxTimestampFuture after now, for
	// documents read back from an archive.
	IgnoreTimestampWindow bool
}

// Validate checks doc, one complete EMF document, against the
// specification and the CloudWatch limits, as CloudWatch would read it at
// now, and returns every violation in document order; none means valid.
// Validate accepts any input, including input that is not JSON. It is safe
// for concurrent use.
func Validate(doc []byte, now time.Time, opts ValidateOptions) []Violation {
	v := validator{now: now, opts: opts}
	if v.opts.MaxSize <= 0 {
		v.opts.MaxSize = DefaultMaxDocumentSize
	}
	v.document(doc)
	return v.out
}

type validator struct {
	now  time.Time
	opts ValidateOptions
	out  []Violation
}

func (v *validator) add(path, problem, allowed string) {
	v.out = append(v.out, Violation{Path: path, Problem: problem, Allowed: allowed})
}

const (
	allowedJSON       = "one JSON object and nothing else"
	allowedAws        = `an object with "Timestamp" and "CloudWatchMetrics"`
	allowedTimestamp  = "an integer number of milliseconds since 1970-01-01T00:00:00Z"
	allowedDirectives = "an array of metric directives"
	allowedDirective  = `an object with "Namespace", "Dimensions" and "Metrics"`
	allowedDimensions = "an array of at least one dimension set, each an array of dimension keys"
	allowedDimSet     = "an array of at most 30 distinct dimension keys"
	allowedMetrics    = "an array of at most 100 metric definitions"
	allowedDefinition = `an object with "Name" and optionally "Unit" and "StorageResolution"`
	allowedMetricVal  = "a number, or an array of 1 to 100 numbers"
	allowedUnique     = "each member name at most once in an object"
	allowedResolution = "1 or 60"
)

func (v *validator) document(doc []byte) {
	if n := len(doc); ByteSize(n) > v.opts.MaxSize {
		v.add("$", "document is "+strconv.Itoa(n)+" bytes", "at most "+strconv.Itoa(int(v.opts.MaxSize))+" bytes")
	}
	root, err := parseJSON(doc)
	if err != nil {
		v.add("$", "is not valid JSON: "+err.Error(), allowedJSON)
		return
	}
	if root.kind != jObject {
		v.add("$", "is "+root.kind.String(), allowedJSON)
		return
	}
	v.duplicates("$", root)
	aws, ok := root.member("_aws")
	if !ok {
		v.add("$._aws", "is missing", allowedAws)
		return
	}
	if aws.kind != jObject {
		v.add("$._aws", "is "+aws.kind.String(), allowedAws)
		return
	}
	v.duplicates("$._aws", aws)
	v.timestamp(aws)
	cwm, ok := aws.member("CloudWatchMetrics")
	switch {
	case !ok:
		v.add("$._aws.CloudWatchMetrics", "is missing", allowedDirectives)
		return
	case cwm.kind != jArray:
		v.add("$._aws.CloudWatchMetrics", "is "+cwm.kind.String(), allowedDirectives)
		return
	}
	resolutions := map[string]int64{}
	for i := range cwm.elems {
		v.directive("$._aws.CloudWatchMetrics["+strconv.Itoa(i)+"]", &cwm.elems[i], root, resolutions)
	}
}

func (v *validator) timestamp(aws *jvalue) {
	const path = "$._aws.Timestamp"
	ts, ok := aws.member("Timestamp")
	if !ok {
		v.add(path, "is missing", allowedTimestamp)
		return
	}
	if ts.kind != jNumber {
		v.add(path, "is "+ts.kind.String(), allowedTimestamp)
		return
	}
	ms, err := strconv.ParseInt(ts.str, 10, 64)
	if err != nil {
		v.add(path, "is "+ts.str+", not an integer", allowedTimestamp)
		return
	}
	if v.opts.IgnoreTimestampWindow {
		return
	}
	t := time.UnixMilli(ms).UTC()
	lo, hi := v.now.Add(-MaxTimestampPast), v.now.Add(MaxTimestampFuture)
	if t.Before(lo) || t.After(hi) {
		v.add(path, "is "+ts.str+" ("+t.Format(time.RFC3339Nano)+")",
			"a time from "+lo.UTC().Format(time.RFC3339)+" to "+hi.UTC().Format(time.RFC3339)+" (14 days before to 2 hours after now)")
	}
}

func (v *validator) directive(path string, d *jvalue, root *jvalue, resolutions map[string]int64) {
	if d.kind != jObject {
		v.add(path, "is "+d.kind.String(), allowedDirective)
		return
	}
	v.duplicates(path, d)
	switch ns, ok := d.member("Namespace"); {
	case !ok:
		v.add(path+".Namespace", "is missing", allowedNamespace)
	case ns.kind != jString:
		v.add(path+".Namespace", "is "+ns.kind.String(), allowedNamespace)
	default:
		if f := checkNamespace(ns.str); !f.ok() {
			v.add(path+".Namespace", f.problem, f.allowed)
		}
	}
	v.dimensions(path+".Dimensions", d, root)
	v.metrics(path+".Metrics", d, root, resolutions)
}

func (v *validator) dimensions(path string, d *jvalue, root *jvalue) {
	dims, ok := d.member("Dimensions")
	switch {
	case !ok:
		v.add(path, "is missing", allowedDimensions)
		return
	case dims.kind != jArray:
		v.add(path, "is "+dims.kind.String(), allowedDimensions)
		return
	case len(dims.elems) == 0:
		v.add(path, "is an empty array", allowedDimensions)
		return
	}
	checked := map[string]bool{} // a key shared by several sets is reported once
	for i := range dims.elems {
		set := &dims.elems[i]
		sp := path + "[" + strconv.Itoa(i) + "]"
		if set.kind != jArray {
			v.add(sp, "is "+set.kind.String(), allowedDimSet)
			continue
		}
		if n := len(set.elems); n > MaxDimensionSetKeys {
			v.add(sp, "has "+strconv.Itoa(n)+" keys", allowedDimSet)
		}
		seen := map[string]bool{}
		for j := range set.elems {
			key := &set.elems[j]
			kp := sp + "[" + strconv.Itoa(j) + "]"
			if key.kind != jString {
				v.add(kp, "is "+key.kind.String(), allowedDimName)
				continue
			}
			if seen[key.str] {
				v.add(kp, "repeats key "+strconv.Quote(key.str), allowedDimSet)
				continue
			}
			seen[key.str] = true
			if f := checkDimensionName(key.str); !f.ok() {
				v.add(kp, f.problem, f.allowed)
			}
			if checked[key.str] {
				continue
			}
			checked[key.str] = true
			tp := memberPath(key.str)
			switch target, ok := root.member(key.str); {
			case !ok:
				v.add(tp, "is missing, but "+kp+" names it as a dimension", "a string member for every dimension key")
			case target.kind != jString:
				v.add(tp, "is "+target.kind.String()+", but "+kp+" names it as a dimension", allowedDimValue)
			default:
				if f := checkDimensionValue(target.str); !f.ok() {
					v.add(tp, f.problem, f.allowed)
				}
			}
		}
	}
}

func (v *validator) metrics(path string, d *jvalue, root *jvalue, resolutions map[string]int64) {
	ms, ok := d.member("Metrics")
	switch {
	case !ok:
		v.add(path, "is missing", allowedMetrics)
		return
	case ms.kind != jArray:
		v.add(path, "is "+ms.kind.String(), allowedMetrics)
		return
	}
	if n := len(ms.elems); n > MaxMetricsPerDirective {
		v.add(path, "has "+strconv.Itoa(n)+" metric definitions", allowedMetrics)
	}
	seen := map[string]bool{}
	for i := range ms.elems {
		def := &ms.elems[i]
		dp := path + "[" + strconv.Itoa(i) + "]"
		if def.kind != jObject {
			v.add(dp, "is "+def.kind.String(), allowedDefinition)
			continue
		}
		v.duplicates(dp, def)
		if u, ok := def.member("Unit"); ok {
			if u.kind != jString {
				v.add(dp+".Unit", "is "+u.kind.String(), allowedUnits())
			} else if u.str == "" || !Unit(u.str).Valid() {
				v.add(dp+".Unit", "is "+strconv.Quote(u.str), allowedUnits())
			}
		}
		res := int64(Standard)
		if r, ok := def.member("StorageResolution"); ok {
			n, err := strconv.ParseInt(r.str, 10, 64)
			switch {
			case r.kind != jNumber:
				v.add(dp+".StorageResolution", "is "+r.kind.String(), allowedResolution)
			case err != nil || (n != 1 && n != 60):
				v.add(dp+".StorageResolution", "is "+r.str, allowedResolution)
			default:
				res = n
			}
		}
		name, ok := def.member("Name")
		switch {
		case !ok:
			v.add(dp+".Name", "is missing", allowedMetric)
			continue
		case name.kind != jString:
			v.add(dp+".Name", "is "+name.kind.String(), allowedMetric)
			continue
		}
		if seen[name.str] {
			v.add(dp+".Name", "repeats metric "+strconv.Quote(name.str)+" in the same directive", "each metric once per directive")
			continue
		}
		seen[name.str] = true
		if f := checkMetricName(name.str); !f.ok() {
			v.add(dp+".Name", f.problem, f.allowed)
		}
		if prev, ok := resolutions[name.str]; ok && prev != res {
			v.add(dp+".StorageResolution", "is "+strconv.FormatInt(res, 10)+" but another definition of "+strconv.Quote(name.str)+" has "+strconv.FormatInt(prev, 10),
				"one storage resolution per metric in a document")
		} else if !ok {
			resolutions[name.str] = res
			v.metricValue(name.str, dp, root)
		}
	}
}

func (v *validator) metricValue(name, defPath string, root *jvalue) {
	tp := memberPath(name)
	target, ok := root.member(name)
	if !ok {
		v.add(tp, "is missing, but "+defPath+" defines it as a metric", "a number or array of numbers for every metric")
		return
	}
	switch target.kind {
	case jNumber:
		v.number(tp, target.str)
	case jArray:
		if n := len(target.elems); n == 0 || n > MaxValuesPerMetric {
			v.add(tp, "has "+strconv.Itoa(n)+" values", allowedMetricVal)
		}
		for i := range target.elems {
			e := &target.elems[i]
			ep := tp + "[" + strconv.Itoa(i) + "]"
			if e.kind != jNumber {
				v.add(ep, "is "+e.kind.String(), allowedValue)
				continue
			}
			v.number(ep, e.str)
		}
	default:
		v.add(tp, "is "+target.kind.String()+", but "+defPath+" defines it as a metric", allowedMetricVal)
	}
}

func (v *validator) number(path, text string) {
	f, err := strconv.ParseFloat(text, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		v.add(path, "is "+text+", not a number", allowedValue)
		return
	}
	if math.IsInf(f, 0) {
		v.add(path, "is "+text+", out of range", allowedValue)
		return
	}
	if fl := checkMetricValue(f); !fl.ok() {
		v.add(path, fl.problem, fl.allowed)
	}
}

func (v *validator) duplicates(path string, o *jvalue) {
	if len(o.members) < 2 {
		return
	}
	seen := make(map[string]bool, len(o.members))
	for _, m := range o.members {
		if seen[m.name] {
			v.add(memberPathFrom(path, m.name), "appears more than once", allowedUnique)
		}
		seen[m.name] = true
	}
}

func allowedUnits() string {
	var b strings.Builder
	b.WriteString("one of ")
	for i, u := range units {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(u))
	}
	return b.String()
}

// memberPath is the JSON path of a root member.
func memberPath(name string) string { return memberPathFrom("$", name) }

func memberPathFrom(parent, name string) string {
	ident := name != ""
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			ident = false
			break
		}
	}
	if ident {
		return parent + "." + name
	}
	return parent + "[" + strconv.Quote(name) + "]"
}

// jvalue is a parsed JSON value that keeps member order and repeated
// members, which encoding/json's maps would hide.
type jvalue struct {
	kind    jkind
	str     string // a string's value or a number's text
	members []jmember
	elems   []jvalue
}

type jmember struct {
	name  string
	value jvalue
}

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNumber
	jString
	jArray
	jObject
)

func (k jkind) String() string {
	return [...]string{"null", "a boolean", "a number", "a string", "an array", "an object"}[k]
}

// member returns the last member called name, as CloudWatch reads it.
func (o *jvalue) member(name string) (*jvalue, bool) {
	for i := len(o.members) - 1; i >= 0; i-- {
		if o.members[i].name == name {
			return &o.members[i].value, true
		}
	}
	return nil, false
}

// maxDepth bounds recursion on hostile input; EMF documents nest 5 deep.
const maxDepth = 1000

func parseJSON(doc []byte) (*jvalue, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var root jvalue
	if err := parseValue(dec, &root, 0); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errors.New("unexpected end of input")
		}
		return nil, err
	}
	off := dec.InputOffset()
	if rest := bytes.TrimLeft(doc[off:], " \t\r\n"); len(rest) > 0 {
		return nil, errors.New("data after the top-level value at byte " + strconv.FormatInt(off+int64(len(doc[off:])-len(rest)), 10))
	}
	return &root, nil
}

func parseValue(dec *json.Decoder, out *jvalue, depth int) error {
	if depth > maxDepth {
		return errors.New("nesting deeper than " + strconv.Itoa(maxDepth) + " levels")
	}
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	switch t := tok.(type) {
	case nil:
		out.kind = jNull
	case bool:
		out.kind = jBool
	case json.Number:
		out.kind, out.str = jNumber, string(t)
	case string:
		out.kind, out.str = jString, t
	case json.Delim:
		switch t {
		case '[':
			out.kind = jArray
			for dec.More() {
				out.elems = append(out.elems, jvalue{})
				if err := parseValue(dec, &out.elems[len(out.elems)-1], depth+1); err != nil {
					return err
				}
			}
		case '{':
			out.kind = jObject
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				out.members = append(out.members, jmember{name: k.(string)})
				if err := parseValue(dec, &out.members[len(out.members)-1].value, depth+1); err != nil {
					return err
				}
			}
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return err
		}
	}
	return nil
}
