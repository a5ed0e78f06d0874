package emf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/internal/jsonstr"
)

// Document is one EMF document as a value: the metrics of one namespace,
// stamped with one time, published under each of its dimension sets, with
// properties carried alongside. A caller builds it without locks; the
// encoder only reads it, so one Document may be encoded by several
// goroutines at once, and separate Documents may be built concurrently.
// The zero value holds no metrics and encodes to nothing.
type Document struct {
	// Namespace is the CloudWatch namespace of every metric.
	Namespace string
	// Timestamp is the time of every metric, written in milliseconds; it
	// must be set.
	Timestamp time.Time
	// Dimensions are the dimension sets: every metric is published once per
	// set. Nil or empty means one set without keys (service-wide). A key
	// appears at most once per set, and a key in several sets has the same
	// value in each, since a document has one member per key.
	Dimensions [][]Dimension
	// Properties are members written into every document (and every piece
	// of a split), in this order. A property with the name of a dimension
	// key or of a metric with values is left out: those members win.
	Properties []Property
	// Metrics are written in this order; a metric without values is left
	// out. Names are distinct.
	Metrics []Metric
}

// Metric is one metric of a Document: its definition and its values.
// It is a plain value; the encoder does not modify it.
type Metric struct {
	Name       string
	Unit       Unit       // "" writes no unit, which CloudWatch reads as None
	Resolution Resolution // 0 means Standard
	// Values are the metric's values, written as a number when there is
	// one and as arrays of at most MaxValuesPerMetric otherwise.
	Values []float64
	// Counts, when not nil, has one entry per value: how many times that
	// value occurred, as in CloudWatch's Values/Counts form. The
	// specification has no counts, so value i is written Counts[i] times
	// (a count of zero leaves it out); a reader such as the PutMetricData
	// sink merges the repeats back into Values and Counts.
	Counts []uint64
}

// Property is a member of a Document that is not a metric or a dimension.
// It is a plain value, safe for concurrent use.
type Property struct {
	Name  string
	Value json.RawMessage // one JSON value, as encoded by NewProperty
}

// NewProperty returns a property whose value is v encoded as JSON: strings,
// numbers and booleans without reflection, json.RawMessage as is (once
// checked), anything else through encoding/json (which sorts map keys, so
// the encoding is deterministic).
func NewProperty(name string, v any) (Property, error) {
	if err := checkPropertyName(name); err != nil {
		return Property{}, fmt.Errorf("new property: %w", err)
	}
	b, err := appendValue(nil, v)
	if err != nil {
		return Property{}, fmt.Errorf("new property %q: %w", name, err)
	}
	return Property{Name: name, Value: b}, nil
}

// StringProperty returns a property whose value is the JSON string s.
func StringProperty(name, s string) Property {
	return Property{Name: name, Value: jsonstr.AppendJSSafe(nil, s)}
}

func checkPropertyName(name string) error {
	if name == "" || name == "_aws" || !utf8.ValidString(name) {
		return &InvalidError{"property name", name, "is empty, reserved or not UTF-8", "valid UTF-8 other than \"\" and \"_aws\""}
	}
	return nil
}

// Limits bound what AppendDocuments writes. It is a plain value, safe for
// concurrent use.
type Limits struct {
	// MaxSize is the largest document written, without its newline;
	// zero means DefaultMaxDocumentSize. At most MaxDocumentSize.
	MaxSize ByteSize
	// Now is the time at which CloudWatch reads the documents: the
	// timestamp must lie from MaxTimestampPast before to
	// MaxTimestampFuture after it.
	Now time.Time
	// IgnoreTimestampWindow skips the check against Now, for documents
	// written to an archive or replayed into a file rather than sent.
	IgnoreTimestampWindow bool
}

// Limits of our own, so that one document bounds the memory it takes.
const (
	maxDimensionSets  = 30
	maxProperties     = 256
	maxMetricNames    = 10000
	maxExpandedValues = 1 << 20 // values of one document once Counts are expanded
)

// AppendDocuments appends doc to dst as one or more JSON lines, each ending
// in a newline and each a complete document within every limit of the
// specification and lim: at most 100 metric definitions per directive and
// 100 values per metric member, and at most lim.MaxSize bytes. A metric
// that does not fit continues in the next document; every document
// carries all dimensions and properties, and no value is lost or repeated.
// The same Document and Limits give byte-identical lines. Bounds of our
// own keep one encoding's memory small: at most 30 dimension sets, 256
// properties, 10,000 metrics and 2^20 values once Counts are expanded.
//
// A document that breaks a rule (a name, value, unit, resolution,
// dimension set or property the specification does not allow, a timestamp
// out of range, repeated names) appends nothing and returns an
// *InvalidError; for a timestamp out of range, a *TimestampError holding
// one. A metric that has no room even for one value next to the
// dimensions and properties, or that would bring the document over 2^20
// values once Counts are expanded, is left out, with an *InvalidError in
// the joined error; the rest is appended. A document without values appends
// nothing. AppendDocuments is safe for concurrent use.
func AppendDocuments(dst []byte, doc *Document, lim Limits) ([]byte, error) {
	e := encoderPool.Get().(*encoder)
	dst, _, _, err := e.encode(dst, doc, lim)
	e.release()
	return dst, err
}

// encoder holds the scratch space of one encoding. It is not safe for
// concurrent use; AppendDocuments takes one from encoderPool.
type encoder struct {
	// trusted skips the checks of names, values, units, resolutions and
	// property JSON, for a Logger, which made them as each was put.
	trusted bool

	keys    []Dimension    // dimension members, in the order first seen
	keyAt   map[string]int // index in keys, once there are many
	members []byte         // dimension and property members of every piece
	head    []byte         // "_aws" member up to the metric definitions
	defs    []byte         // metric definitions of the current piece
	ms      []mstate       // metrics with values
	spans   []int          // for each of ms: start in vals, or -1
	vals    []float64      // values expanded from Counts
	names   stringSet      // every metric name
	valued  stringSet      // names of metrics with values
	props   stringSet      // property names
	setKeys stringSet      // keys of one dimension set
	skipped []error        // metrics left out for having too many values

	buf []byte // a Writer's output, reused

	// state of the piece being built
	out      []byte
	docStart int
	docNo    int // pieces opened
	docs     int // pieces written
	nDefs    int
}

// mstate is a metric's progress through the pieces of one encoding.
type mstate struct {
	m      *Metric
	values []float64 // expanded
	res    Resolution
	sent   int // values placed so far
	doc    int // last piece that holds the metric
}

var encoderPool = sync.Pool{New: func() any { return new(encoder) }}

// release returns e to the pool, unless a large document grew its buffers.
func (e *encoder) release() {
	e.out = nil
	clear(e.ms) // drop references to the caller's metrics
	clear(e.skipped)
	if cap(e.buf) > 4<<20 || cap(e.vals) > 1<<16 || cap(e.members) > 1<<16 || cap(e.defs) > 1<<16 || len(e.keyAt) > 1<<10 {
		return
	}
	encoderPool.Put(e)
}

// encode appends doc to dst as lines and reports the number of documents
// appended and of refusals (a refused document, or each metric left out).
func (e *encoder) encode(dst []byte, doc *Document, lim Limits) (out []byte, docs, rejected int, err error) {
	max := int(lim.MaxSize)
	if max == 0 {
		max = int(DefaultMaxDocumentSize)
	}
	if max < 0 || max > int(MaxDocumentSize) {
		return dst, 0, 1, fmt.Errorf("encode document: %w", &InvalidError{"document size limit", strconv.Itoa(max), "is out of range", "1 to " + strconv.Itoa(int(MaxDocumentSize)) + " bytes"})
	}
	total, err := e.prepare(doc, lim)
	if err != nil {
		return dst, 0, 1, fmt.Errorf("encode document: %w", err)
	}
	errs := e.skipped
	rejected = len(errs)
	if total == 0 {
		return dst, 0, rejected, errors.Join(errs...)
	}

	h := append(e.head[:0], `"_aws":{"Timestamp":`...)
	h = strconv.AppendInt(h, doc.Timestamp.UnixMilli(), 10)
	h = append(h, `,"CloudWatchMetrics":[{"Namespace":`...)
	h = jsonstr.AppendJSSafe(h, doc.Namespace)
	h = append(h, `,"Dimensions":`...)
	h = e.appendSets(h, doc.Dimensions)
	h = append(h, `,"Metrics":[`...)
	e.head = h

	e.out, e.docNo, e.docs = dst, 0, 0
	e.open()
	for left := total; left > 0; {
		for i := range e.ms {
			m := &e.ms[i]
			if m.sent >= len(m.values) {
				continue
			}
			if e.nDefs == MaxMetricsPerDirective || m.doc == e.docNo {
				e.close()
				e.open()
			}
			n := min(MaxValuesPerMetric, len(m.values)-m.sent)
			for n > 0 {
				mark, dmark := len(e.out), len(e.defs)
				e.out = appendMetricMember(e.out, len(e.out) > e.docStart+1, m.m.Name, m.values[m.sent:m.sent+n])
				e.defs = appendDefinition(e.defs, e.nDefs > 0, m.m.Name, m.m.Unit, m.res)
				if len(e.out)-e.docStart+1+len(e.head)+len(e.defs)+len(docTail) <= max {
					break
				}
				e.out, e.defs = e.out[:mark], e.defs[:dmark]
				switch {
				case e.nDefs > 0:
					e.close()
					e.open()
				case n > 1:
					n = (n + 1) / 2
				default:
					n = 0
				}
			}
			if n == 0 {
				rest := len(m.values) - m.sent
				rejected++
				errs = append(errs, fmt.Errorf("encode metric %q: %w", m.m.Name, &InvalidError{"document size", strconv.Itoa(len(e.out) - e.docStart),
					"leaves no room for one value of the metric (" + strconv.Itoa(rest) + " values refused)",
					"properties and dimensions that fit in " + strconv.Itoa(max) + " bytes with the metrics"}))
				m.sent = len(m.values)
				left -= rest
				continue
			}
			m.sent += n
			m.doc = e.docNo
			e.nDefs++
			left -= n
		}
	}
	e.close()
	out = e.out
	e.out = nil
	return out, e.docs, rejected, errors.Join(errs...)
}

// open starts a piece with every dimension and property member.
func (e *encoder) open() {
	e.docNo++
	e.docStart = len(e.out)
	e.out = append(e.out, '{')
	e.out = append(e.out, e.members...)
	e.defs, e.nDefs = e.defs[:0], 0
}

// docTail closes the definitions, the directive, its array, "_aws" and
// the document.
const docTail = `]}]}}`

// close ends the current piece, or takes it back if it holds no metric.
func (e *encoder) close() {
	if e.nDefs == 0 {
		e.out = e.out[:e.docStart]
		return
	}
	e.out = append(e.out, ',')
	e.out = append(e.out, e.head...)
	e.out = append(e.out, e.defs...)
	e.out = append(e.out, docTail...)
	e.out = append(e.out, '\n')
	e.docs++
}

// prepare checks doc against the specification and lim, and fills the
// dimension and property members and the metric states. It returns the
// number of values to write.
func (e *encoder) prepare(doc *Document, lim Limits) (int, error) {
	if !e.trusted {
		if f := checkNamespace(doc.Namespace); !f.ok() {
			return 0, &InvalidError{"namespace", doc.Namespace, f.problem, f.allowed}
		}
	}
	if err := checkTimestamp(doc.Timestamp, lim); err != nil {
		return 0, err
	}
	if err := e.prepareDimensions(doc.Dimensions); err != nil {
		return 0, err
	}
	total, err := e.prepareMetrics(doc.Metrics)
	if err != nil {
		return 0, err
	}
	return total, e.prepareProperties(doc.Properties)
}

func checkTimestamp(ts time.Time, lim Limits) error {
	if ts.IsZero() {
		return &InvalidError{"timestamp", "0001-01-01T00:00:00Z", "is not set", "the time of the metrics"}
	}
	if lim.IgnoreTimestampWindow {
		return nil
	}
	if ts.Before(lim.Now.Add(-MaxTimestampPast)) || ts.After(lim.Now.Add(MaxTimestampFuture)) {
		return &TimestampError{InvalidError{"timestamp", ts.UTC().Format(time.RFC3339Nano),
			"is out of range at " + lim.Now.UTC().Format(time.RFC3339), "14 days before to 2 hours after now"}, ts.After(lim.Now)}
	}
	return nil
}

func (e *encoder) prepareDimensions(sets [][]Dimension) error {
	if len(sets) > maxDimensionSets {
		return &InvalidError{"dimension sets", strconv.Itoa(len(sets)), "are too many", "at most " + strconv.Itoa(maxDimensionSets) + " dimension sets"}
	}
	e.keys = e.keys[:0]
	clear(e.keyAt)
	for _, set := range sets {
		if !e.trusted {
			if err := checkDimensions("dimension", set); err != nil {
				return err
			}
		}
		e.setKeys.reset()
		for _, d := range set {
			if !e.trusted && !e.setKeys.add(d.Name) {
				return &InvalidError{"dimension set", dimensionKeys(set), "repeats key " + strconv.Quote(d.Name), "each key once per set"}
			}
			switch i := e.key(d.Name); {
			case i < 0:
				e.addKey(d)
			case e.keys[i].Value != d.Value:
				return &InvalidError{"dimension value", d.Value, "differs from " + strconv.Quote(e.keys[i].Value) + " given for key " + strconv.Quote(d.Name) + " in another set", "one value per key in a document"}
			}
		}
	}
	m := e.members[:0]
	for _, d := range e.keys {
		m = jsonstr.AppendJSSafe(appendMemberName(m, d.Name), d.Value)
	}
	e.members = m
	return nil
}

// appendMemberName appends name and a colon to a list of members, after
// a comma unless the list is empty.
func appendMemberName(members []byte, name string) []byte {
	if len(members) > 0 {
		members = append(members, ',')
	}
	return append(jsonstr.AppendJSSafe(members, name), ':')
}

// key returns the index of the dimension member called name, or -1.
func (e *encoder) key(name string) int {
	if len(e.keyAt) > 0 {
		if i, ok := e.keyAt[name]; ok {
			return i
		}
		return -1
	}
	for i := range e.keys {
		if e.keys[i].Name == name {
			return i
		}
	}
	return -1
}

func (e *encoder) addKey(d Dimension) {
	const linearMax = 16
	e.keys = append(e.keys, d)
	switch {
	case len(e.keyAt) > 0:
		e.keyAt[d.Name] = len(e.keys) - 1
	case len(e.keys) > linearMax:
		if e.keyAt == nil {
			e.keyAt = make(map[string]int)
		}
		for i, k := range e.keys {
			e.keyAt[k.Name] = i
		}
	}
}

// appendSets appends the dimension sets as arrays of keys.
func (e *encoder) appendSets(dst []byte, sets [][]Dimension) []byte {
	if len(sets) == 0 {
		return append(dst, "[[]]"...)
	}
	dst = append(dst, '[')
	for i, set := range sets {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '[')
		for j, d := range set {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = jsonstr.AppendJSSafe(dst, d.Name)
		}
		dst = append(dst, ']')
	}
	return append(dst, ']')
}

func (e *encoder) prepareMetrics(metrics []Metric) (int, error) {
	if len(metrics) > maxMetricNames {
		return 0, &InvalidError{"metrics", strconv.Itoa(len(metrics)), "are too many", "at most " + strconv.Itoa(maxMetricNames) + " metrics"}
	}
	e.names.reset()
	e.valued.reset()
	e.ms, e.spans, e.vals, e.skipped = e.ms[:0], e.spans[:0], e.vals[:0], e.skipped[:0]
	total := 0
	for i := range metrics {
		m := &metrics[i]
		if !e.trusted {
			if err := e.checkMetric(m); err != nil {
				return 0, err
			}
		}
		n := len(m.Values)
		if m.Counts != nil {
			n = 0
			for _, c := range m.Counts {
				n += int(min(c, maxExpandedValues+1))
			}
		}
		if n == 0 {
			continue
		}
		if total+n > maxExpandedValues {
			e.skipped = append(e.skipped, fmt.Errorf("encode metric %q: %w", m.Name, &InvalidError{"metric values", strconv.Itoa(n),
				"are too many once counts are expanded, after " + strconv.Itoa(total) + " values of other metrics",
				"at most " + strconv.Itoa(maxExpandedValues) + " values per document"}))
			continue
		}
		span, values := -1, m.Values
		if m.Counts != nil {
			span = len(e.vals)
			for j, v := range m.Values {
				for range m.Counts[j] {
					e.vals = append(e.vals, v)
				}
			}
			values = e.vals[span:] // re-sliced below once vals stops growing
		}
		total += len(values)
		e.valued.add(m.Name)
		e.ms = append(e.ms, mstate{m: m, values: values, res: m.Resolution.normal()})
		e.spans = append(e.spans, span)
	}
	for i, span := range e.spans {
		if span >= 0 {
			n := len(e.ms[i].values)
			e.ms[i].values = e.vals[span : span+n]
		}
	}
	return total, nil
}

func (e *encoder) checkMetric(m *Metric) error {
	if f := checkMetricName(m.Name); !f.ok() {
		return &InvalidError{"metric name", m.Name, f.problem, f.allowed}
	}
	if m.Name == "_aws" {
		return &InvalidError{"metric name", m.Name, "is reserved", "any other name"}
	}
	if !e.names.add(m.Name) {
		return &InvalidError{"metric name", m.Name, "is given twice", "each metric once per document"}
	}
	if e.key(m.Name) >= 0 {
		return &InvalidError{"metric name", m.Name, "is already a dimension key", "names that are not dimension keys"}
	}
	if !m.Unit.Valid() {
		return &InvalidError{"metric unit", string(m.Unit), "is not a CloudWatch unit", allowedUnits()}
	}
	if !m.Resolution.Valid() {
		return &InvalidError{"storage resolution", strconv.Itoa(int(m.Resolution)), "is not valid", allowedResolution}
	}
	if m.Counts != nil && len(m.Counts) != len(m.Values) {
		return &InvalidError{"metric counts", m.Name, "has " + strconv.Itoa(len(m.Counts)) + " counts for " + strconv.Itoa(len(m.Values)) + " values", "one count per value, or no counts"}
	}
	for _, v := range m.Values {
		if !validMetricValue(v) {
			f := checkMetricValue(v)
			return &InvalidError{"metric value", strconv.FormatFloat(v, 'g', -1, 64), f.problem + " (metric " + strconv.Quote(m.Name) + ")", f.allowed}
		}
	}
	return nil
}

func (e *encoder) prepareProperties(props []Property) error {
	if len(props) > maxProperties {
		return &InvalidError{"properties", strconv.Itoa(len(props)), "are too many", "at most " + strconv.Itoa(maxProperties) + " properties"}
	}
	e.props.reset()
	m := e.members
	for _, p := range props {
		if !e.trusted {
			if err := e.checkProperty(p); err != nil {
				return err
			}
		}
		if e.key(p.Name) >= 0 || e.valued.has(p.Name) {
			continue
		}
		m = appendCompact(appendMemberName(m, p.Name), p.Value)
	}
	e.members = m
	return nil
}

func (e *encoder) checkProperty(p Property) error {
	if err := checkPropertyName(p.Name); err != nil {
		return err
	}
	if !e.props.add(p.Name) {
		return &InvalidError{"property name", p.Name, "is given twice", "each property once per document"}
	}
	if !json.Valid(p.Value) {
		return &InvalidError{"property value", string(p.Value), "is not valid JSON (property " + strconv.Quote(p.Name) + ")", "one JSON value"}
	}
	return nil
}

// appendCompact appends v, valid JSON, without the line breaks a raw
// value may hold between its tokens: a document is one line. A line break
// cannot occur inside a JSON string, so any there is white space.
func appendCompact(dst, v []byte) []byte {
	if bytes.IndexByte(v, '\n') < 0 && bytes.IndexByte(v, '\r') < 0 {
		return append(dst, v...)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return append(dst, "null"...) // not reached: v was checked
	}
	return append(dst, b.Bytes()...)
}

// validMetricValue reports whether CloudWatch accepts v; checkMetricValue
// says why not.
func validMetricValue(v float64) bool {
	if v != v {
		return false
	}
	a := v
	if a < 0 {
		a = -a
	}
	return a <= maxMetricValue && (a == 0 || a >= minMetricMagnitude)
}

func appendMetricMember(dst []byte, comma bool, name string, values []float64) []byte {
	if comma {
		dst = append(dst, ',')
	}
	dst = jsonstr.AppendJSSafe(dst, name)
	dst = append(dst, ':')
	if len(values) == 1 {
		return appendFloat(dst, values[0])
	}
	dst = append(dst, '[')
	for i, v := range values {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendFloat(dst, v)
	}
	return append(dst, ']')
}

func appendDefinition(dst []byte, comma bool, name string, unit Unit, res Resolution) []byte {
	if comma {
		dst = append(dst, ',')
	}
	dst = append(dst, `{"Name":`...)
	dst = jsonstr.AppendJSSafe(dst, name)
	if unit != "" {
		dst = append(dst, `,"Unit":`...)
		dst = jsonstr.AppendJSSafe(dst, string(unit))
	}
	if res == High {
		dst = append(dst, `,"StorageResolution":1`...)
	}
	return append(dst, '}')
}
