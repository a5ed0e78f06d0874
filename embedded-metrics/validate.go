package emf

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Violation is one way in which a document breaks the embedded metric
// format specification or a CloudWatch limit.
// It is a plain value, safe for concurrent use.
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
// the default size limit. It is a plain value, safe for concurrent use.
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
	v := validatorPool.Get().(*validator)
	defer v.release()
	v.now, v.opts = now, opts
	if v.opts.MaxSize <= 0 {
		v.opts.MaxSize = DefaultMaxDocumentSize
	}
	v.document(doc)
	return v.out
}

// validator is the state of one Validate call, reused through
// validatorPool.
type validator struct {
	now  time.Time
	opts ValidateOptions
	out  []Violation
	d    jdoc

	// resolutions holds each metric's storage resolution across the
	// document's directives; the sets are scratch for one object or array.
	resolutions map[string]int64
	members     stringSet // member names of one object
	keys        stringSet // keys of one dimension set
	targets     stringSet // dimension keys whose value was checked
	names       stringSet // metric names of one directive
}

var validatorPool = sync.Pool{New: func() any { return &validator{resolutions: make(map[string]int64)} }}

// release clears v and returns it to the pool.
func (v *validator) release() {
	v.out = nil
	v.d.src, v.d.esc = "", ""
	clear(v.resolutions)
	if cap(v.d.nodes) > 1<<16 || cap(v.d.buf) > 1<<20 || len(v.resolutions) > 1<<10 {
		return // let a hostile document's buffers go
	}
	validatorPool.Put(v)
}

func (v *validator) add(path jpath, problem, allowed string) {
	v.out = append(v.out, Violation{Path: path.String(), Problem: problem, Allowed: allowed})
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
	var root jpath
	if n := len(doc); ByteSize(n) > v.opts.MaxSize {
		v.add(root, "document is "+strconv.Itoa(n)+" bytes", "at most "+strconv.Itoa(int(v.opts.MaxSize))+" bytes")
	}
	d := &v.d
	if err := d.decode(string(doc)); err != nil {
		v.add(root, "is not valid JSON: "+err.Error(), allowedJSON)
		return
	}
	if k := d.nodes[0].kind; k != jObject {
		v.add(root, "is "+k.String(), allowedJSON)
		return
	}
	v.duplicates(root, 0)
	awsPath := root.member("_aws")
	aws, ok := d.member(0, "_aws")
	if !ok {
		v.add(awsPath, "is missing", allowedAws)
		return
	}
	if k := d.nodes[aws].kind; k != jObject {
		v.add(awsPath, "is "+k.String(), allowedAws)
		return
	}
	v.duplicates(awsPath, aws)
	v.timestamp(awsPath, aws)
	cwmPath := awsPath.member("CloudWatchMetrics")
	cwm, ok := d.member(aws, "CloudWatchMetrics")
	switch {
	case !ok:
		v.add(cwmPath, "is missing", allowedDirectives)
		return
	case d.nodes[cwm].kind != jArray:
		v.add(cwmPath, "is "+d.nodes[cwm].kind.String(), allowedDirectives)
		return
	}
	for i, dir := range d.elems(cwm) {
		v.directive(cwmPath.index(i), dir)
	}
}

func (v *validator) timestamp(awsPath jpath, aws int32) {
	path := awsPath.member("Timestamp")
	ts, ok := v.d.member(aws, "Timestamp")
	if !ok {
		v.add(path, "is missing", allowedTimestamp)
		return
	}
	if k := v.d.nodes[ts].kind; k != jNumber {
		v.add(path, "is "+k.String(), allowedTimestamp)
		return
	}
	text := v.d.text(ts)
	ms, err := v.d.int(ts)
	if err != nil {
		v.add(path, "is "+text+", not an integer", allowedTimestamp)
		return
	}
	if v.opts.IgnoreTimestampWindow {
		return
	}
	t := time.UnixMilli(ms).UTC()
	lo, hi := v.now.Add(-MaxTimestampPast), v.now.Add(MaxTimestampFuture)
	if t.Before(lo) || t.After(hi) {
		v.add(path, "is "+text+" ("+t.Format(time.RFC3339Nano)+")",
			"a time from "+lo.UTC().Format(time.RFC3339)+" to "+hi.UTC().Format(time.RFC3339)+" (14 days before to 2 hours after now)")
	}
}

func (v *validator) directive(path jpath, dir int32) {
	d := &v.d
	if k := d.nodes[dir].kind; k != jObject {
		v.add(path, "is "+k.String(), allowedDirective)
		return
	}
	v.duplicates(path, dir)
	nsPath := path.member("Namespace")
	switch ns, ok := d.member(dir, "Namespace"); {
	case !ok:
		v.add(nsPath, "is missing", allowedNamespace)
	case d.nodes[ns].kind != jString:
		v.add(nsPath, "is "+d.nodes[ns].kind.String(), allowedNamespace)
	default:
		if f := checkNamespace(d.text(ns)); !f.ok() {
			v.add(nsPath, f.problem, f.allowed)
		}
	}
	v.dimensions(path.member("Dimensions"), dir)
	v.metrics(path.member("Metrics"), dir)
}

func (v *validator) dimensions(path jpath, dir int32) {
	d := &v.d
	dims, ok := d.member(dir, "Dimensions")
	switch {
	case !ok:
		v.add(path, "is missing", allowedDimensions)
		return
	case d.nodes[dims].kind != jArray:
		v.add(path, "is "+d.nodes[dims].kind.String(), allowedDimensions)
		return
	case d.nodes[dims].n == 0:
		v.add(path, "is an empty array", allowedDimensions)
		return
	}
	v.targets.reset() // a key shared by several sets is reported once
	for i, set := range d.elems(dims) {
		sp := path.index(i)
		if k := d.nodes[set].kind; k != jArray {
			v.add(sp, "is "+k.String(), allowedDimSet)
			continue
		}
		if n := int(d.nodes[set].n); n > MaxDimensionSetKeys {
			v.add(sp, "has "+strconv.Itoa(n)+" keys", allowedDimSet)
		}
		v.keys.reset()
		for j, key := range d.elems(set) {
			kp := sp.index(j)
			if k := d.nodes[key].kind; k != jString {
				v.add(kp, "is "+k.String(), allowedDimName)
				continue
			}
			name := d.text(key)
			if !v.keys.add(name) {
				v.add(kp, "repeats key "+strconv.Quote(name), allowedDimSet)
				continue
			}
			if f := checkDimensionName(name); !f.ok() {
				v.add(kp, f.problem, f.allowed)
			}
			if !v.targets.add(name) {
				continue
			}
			tp := jpath{}.member(name)
			switch target, ok := d.member(0, name); {
			case !ok:
				v.add(tp, "is missing, but "+kp.String()+" names it as a dimension", "a string member for every dimension key")
			case d.nodes[target].kind != jString:
				v.add(tp, "is "+d.nodes[target].kind.String()+", but "+kp.String()+" names it as a dimension", allowedDimValue)
			default:
				if f := checkDimensionValue(d.text(target)); !f.ok() {
					v.add(tp, f.problem, f.allowed)
				}
			}
		}
	}
}

func (v *validator) metrics(path jpath, dir int32) {
	d := &v.d
	ms, ok := d.member(dir, "Metrics")
	switch {
	case !ok:
		v.add(path, "is missing", allowedMetrics)
		return
	case d.nodes[ms].kind != jArray:
		v.add(path, "is "+d.nodes[ms].kind.String(), allowedMetrics)
		return
	}
	if n := int(d.nodes[ms].n); n > MaxMetricsPerDirective {
		v.add(path, "has "+strconv.Itoa(n)+" metric definitions", allowedMetrics)
	}
	v.names.reset()
	for i, def := range d.elems(ms) {
		dp := path.index(i)
		if k := d.nodes[def].kind; k != jObject {
			v.add(dp, "is "+k.String(), allowedDefinition)
			continue
		}
		v.duplicates(dp, def)
		if u, ok := d.member(def, "Unit"); ok {
			if k := d.nodes[u].kind; k != jString {
				v.add(dp.member("Unit"), "is "+k.String(), allowedUnits())
			} else if s := d.text(u); s == "" || !Unit(s).Valid() {
				v.add(dp.member("Unit"), "is "+strconv.Quote(s), allowedUnits())
			}
		}
		res := int64(Standard)
		if r, ok := d.member(def, "StorageResolution"); ok {
			switch n, err := d.int(r); {
			case d.nodes[r].kind != jNumber:
				v.add(dp.member("StorageResolution"), "is "+d.nodes[r].kind.String(), allowedResolution)
			case err != nil || (n != 1 && n != 60):
				v.add(dp.member("StorageResolution"), "is "+d.text(r), allowedResolution)
			default:
				res = n
			}
		}
		np := dp.member("Name")
		name, ok := d.member(def, "Name")
		switch {
		case !ok:
			v.add(np, "is missing", allowedMetric)
			continue
		case d.nodes[name].kind != jString:
			v.add(np, "is "+d.nodes[name].kind.String(), allowedMetric)
			continue
		}
		s := d.text(name)
		if !v.names.add(s) {
			v.add(np, "repeats metric "+strconv.Quote(s)+" in the same directive", "each metric once per directive")
			continue
		}
		if f := checkMetricName(s); !f.ok() {
			v.add(np, f.problem, f.allowed)
		}
		if prev, ok := v.resolutions[s]; ok && prev != res {
			v.add(dp.member("StorageResolution"), "is "+strconv.FormatInt(res, 10)+" but another definition of "+strconv.Quote(s)+" has "+strconv.FormatInt(prev, 10),
				"one storage resolution per metric in a document")
		} else if !ok {
			v.resolutions[s] = res
			v.metricValue(s, dp)
		}
	}
}

func (v *validator) metricValue(name string, defPath jpath) {
	d := &v.d
	tp := jpath{}.member(name)
	target, ok := d.member(0, name)
	if !ok {
		v.add(tp, "is missing, but "+defPath.String()+" defines it as a metric", "a number or array of numbers for every metric")
		return
	}
	switch k := d.nodes[target].kind; k {
	case jNumber:
		v.number(tp, target)
	case jArray:
		if n := int(d.nodes[target].n); n == 0 || n > MaxValuesPerMetric {
			v.add(tp, "has "+strconv.Itoa(n)+" values", allowedMetricVal)
		}
		for i, e := range d.elems(target) {
			if k := d.nodes[e].kind; k != jNumber {
				v.add(tp.index(i), "is "+k.String(), allowedValue)
				continue
			}
			v.number(tp.index(i), e)
		}
	default:
		v.add(tp, "is "+k.String()+", but "+defPath.String()+" defines it as a metric", allowedMetricVal)
	}
}

func (v *validator) number(path jpath, i int32) {
	if _, f := v.d.metricValue(i); !f.ok() {
		v.add(path, f.problem, f.allowed)
	}
}

func (v *validator) duplicates(path jpath, o int32) {
	if v.d.nodes[o].n < 2 {
		return
	}
	v.members.reset()
	for name := range v.d.keys(o) {
		if !v.members.add(name) {
			v.add(path.member(name), "appears more than once", allowedUnique)
		}
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

// jpath is the JSON path of a value in an EMF document, kept as its steps
// and formatted only when a violation names it; EMF paths are at most six
// steps deep.
type jpath struct {
	steps [8]jstep
	n     int
}

// jstep is one step of a jpath: a member name, or an array index.
type jstep struct {
	name  string
	index int // -1 for a member
}

func (p jpath) member(name string) jpath {
	p.steps[p.n] = jstep{name: name, index: -1}
	p.n++
	return p
}

func (p jpath) index(i int) jpath {
	p.steps[p.n] = jstep{index: i}
	p.n++
	return p
}

// String formats p as $._aws.CloudWatchMetrics[0].Namespace; a member
// name that is not an identifier is quoted: $["a.b"].
func (p jpath) String() string {
	b := []byte{'$'}
	for _, s := range p.steps[:p.n] {
		switch {
		case s.index >= 0:
			b = append(strconv.AppendInt(append(b, '['), int64(s.index), 10), ']')
		case isIdentifier(s.name):
			b = append(append(b, '.'), s.name...)
		default:
			b = append(strconv.AppendQuote(append(b, '['), s.name), ']')
		}
	}
	return string(b)
}

func isIdentifier(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return name != ""
}

// memberPath is the JSON path of a root member.
func memberPath(name string) string { return jpath{}.member(name).String() }

// stringSet is a set of strings that does not allocate while small. The
// zero value is empty.
type stringSet struct {
	small []string
	large map[string]struct{}
}

func (s *stringSet) reset() {
	s.small = s.small[:0]
	clear(s.large)
}

// add adds k and reports whether it was not there yet.
func (s *stringSet) add(k string) bool {
	const smallMax = 16
	if len(s.large) > 0 {
		if _, ok := s.large[k]; ok {
			return false
		}
		s.large[k] = struct{}{}
		return true
	}
	if slices.Contains(s.small, k) {
		return false
	}
	if len(s.small) < smallMax {
		s.small = append(s.small, k)
		return true
	}
	if s.large == nil {
		s.large = make(map[string]struct{})
	}
	for _, x := range s.small {
		s.large[x] = struct{}{}
	}
	s.large[k] = struct{}{}
	return true
}

// has reports whether k is in s.
func (s *stringSet) has(k string) bool {
	if len(s.large) > 0 {
		_, ok := s.large[k]
		return ok
	}
	return slices.Contains(s.small, k)
}
