package emf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/internal/jsonstr"
)

// Dimension is a name and value pair that is part of a metric's identity,
// or, in Environment.Properties, a plain property.
// It is a plain value, safe for concurrent use.
type Dimension struct {
	Name  string
	Value string
}

// InvalidError reports a name or value the specification does not allow;
// the call that received it did nothing.
// It is not modified once returned, so it is safe for concurrent use.
type InvalidError struct {
	Field   string // what was given: "metric name", "metric value", "dimension value", ...
	Value   string // the value given, as text
	Problem string // what is wrong with it
	Allowed string // what is allowed
}

// Error formats e as `field "value" problem; allowed: what`.
func (e *InvalidError) Error() string {
	return e.Field + " " + strconv.Quote(e.Value) + " " + e.Problem + "; allowed: " + e.Allowed
}

// TimestampError is the *InvalidError of a document whose timestamp lies
// outside the time CloudWatch accepts, from MaxTimestampPast before to
// MaxTimestampFuture after now: it says which side, so that a caller can
// tell an old window replayed from a clock ahead. errors.As finds the
// InvalidError in it too. It is not modified once returned, so it is safe
// for concurrent use.
type TimestampError struct {
	InvalidError
	// Ahead is true for a timestamp more than MaxTimestampFuture after
	// now, false for one more than MaxTimestampPast before it.
	Ahead bool
}

// Unwrap returns the InvalidError.
func (e *TimestampError) Unwrap() error { return &e.InvalidError }

var (
	// ErrBufferFull is returned when Config.MaxBufferedValues values wait
	// for a flush; the value was dropped and counted.
	ErrBufferFull = errors.New("metric buffer is full")
	// ErrClosed is returned by calls on a closed Logger.
	ErrClosed = errors.New("logger is closed")
)

// Logger collects metric values, dimensions and properties and, on Flush,
// writes them as EMF documents to its sinks, split as the limits require.
// It is the front end of a Writer: each flush builds one Document from
// what is buffered and encodes it as AppendDocuments does.
// It is safe for concurrent use. Create one with New.
type Logger struct {
	cfg Config
	env Environment
	w   *Writer

	mu          sync.Mutex // guards the fields up to flushMu
	closed      bool
	namespace   string
	useDefaults bool
	defaults    []Dimension
	sets        [][]Dimension // custom dimension sets, without defaults
	props       []Property
	metrics     []metric
	index       map[string]int // metric name → index in metrics
	buffered    int
	timestamp   time.Time
	dimsDirty   bool
	dimKeys     map[string]string // dimension key → value, over all sets
	docSets     [][]Dimension     // the dimension sets of a document, defaults added, keys once, values resolved
	docMetrics  []Metric          // scratch: the metrics of one flush

	flushMu sync.Mutex // serialises flushes; guards the fields below
	enc     encoder
	out     []byte // the documents of one flush, as lines

	rejected atomic.Uint64
	dropped  atomic.Uint64
}

type metric struct {
	name   string
	unit   Unit
	res    Resolution
	values []float64
}

// New returns a Logger configured by cfg (defaults filled in, then
// validated) that writes to sinks. getenv reads the environment once, for
// the Lambda environment; nil reads nothing.
func New(cfg Config, getenv func(string) string, sinks ...Sink) (*Logger, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configure emf logger: %w", err)
	}
	env := ResolveEnvironment(cfg, getenv)
	w, err := NewWriter(WriterOptions{MaxDocumentSize: cfg.MaxDocumentSize, ValidateDocuments: cfg.ValidateDocuments}, sinks...)
	if err != nil {
		return nil, fmt.Errorf("configure emf logger: %w", err)
	}
	l := &Logger{
		cfg:         cfg,
		env:         env,
		w:           w,
		namespace:   cfg.Namespace,
		useDefaults: !cfg.NoDefaultDimensions,
		index:       make(map[string]int),
		dimsDirty:   true,
	}
	l.enc.trusted = true // every name and value was checked as it was put
	if l.useDefaults {
		l.defaults = env.defaultDimensions()
		if err := checkDimensions("default dimension", l.defaults); err != nil {
			return nil, fmt.Errorf("configure emf logger: %w", err)
		}
	}
	for _, p := range env.Properties {
		if err := l.SetProperty(p.Name, p.Value); err != nil {
			return nil, fmt.Errorf("configure emf logger: %w", err)
		}
	}
	return l, nil
}

// Environment returns the environment resolved by New.
func (l *Logger) Environment() Environment { return l.env }

// PutMetric adds value to the metric called name, at standard resolution.
// A metric keeps its unit and resolution until the next flush. It returns
// an *InvalidError for a name, value or unit the specification does not
// allow, and ErrBufferFull when the buffer is full; either way the value is
// counted (as rejected or dropped) and not kept.
func (l *Logger) PutMetric(name string, value float64, unit Unit) error {
	return l.PutMetricWithResolution(name, value, unit, Standard)
}

// PutMetricWithResolution is PutMetric with a storage resolution, High or
// Standard. One metric has one resolution per flush.
func (l *Logger) PutMetricWithResolution(name string, value float64, unit Unit, res Resolution) error {
	if !validMetricValue(value) {
		l.rejected.Add(1)
		f := checkMetricValue(value)
		return fmt.Errorf("put metric %q: %w", name, &InvalidError{"metric value", strconv.FormatFloat(value, 'g', -1, 64), f.problem, f.allowed})
	}
	res = res.normal()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.dropped.Add(1)
		return fmt.Errorf("put metric %q: %w", name, ErrClosed)
	}
	i, ok := l.index[name]
	var m *metric
	if ok {
		m = &l.metrics[i]
	}
	if !ok || len(m.values) == 0 || m.unit != unit || m.res != res {
		if err := l.admitLocked(name, unit, res, m); err != nil {
			l.mu.Unlock()
			l.rejected.Add(1)
			return fmt.Errorf("put metric %q: %w", name, err)
		}
		if !ok {
			if len(l.metrics) >= maxMetricNames {
				l.mu.Unlock()
				l.dropped.Add(1)
				return fmt.Errorf("put metric %q: %w (%d metric names)", name, ErrBufferFull, maxMetricNames)
			}
			l.index[name] = len(l.metrics)
			l.metrics = append(l.metrics, metric{name: name})
			m = &l.metrics[len(l.metrics)-1]
		}
		m.unit, m.res = unit, res
	}
	if l.buffered >= l.cfg.MaxBufferedValues {
		l.mu.Unlock()
		l.dropped.Add(1)
		return fmt.Errorf("put metric %q: %w", name, ErrBufferFull)
	}
	m.values = append(m.values, value)
	l.buffered++
	l.mu.Unlock()
	return nil
}

// admitLocked checks a metric that is new in this flush, or whose unit or
// resolution changes; m is its entry, if any.
func (l *Logger) admitLocked(name string, unit Unit, res Resolution, m *metric) error {
	if m != nil && len(m.values) > 0 {
		if m.unit != unit {
			return &InvalidError{"metric unit", string(unit), "differs from " + strconv.Quote(string(m.unit)) + " given earlier in this batch", "one unit per metric per flush"}
		}
		return &InvalidError{"storage resolution", strconv.Itoa(int(res)), "differs from " + strconv.Itoa(int(m.res)) + " given earlier in this batch", "one resolution per metric per flush"}
	}
	if f := checkMetricName(name); !f.ok() {
		return &InvalidError{"metric name", name, f.problem, f.allowed}
	}
	if name == "_aws" {
		return &InvalidError{"metric name", name, "is reserved", "any other name"}
	}
	if !unit.Valid() {
		return &InvalidError{"metric unit", string(unit), "is not a CloudWatch unit", allowedUnits()}
	}
	if !res.Valid() {
		return &InvalidError{"storage resolution", strconv.Itoa(int(res)), "is not valid", allowedResolution}
	}
	l.refreshDimensionsLocked()
	if _, ok := l.dimKeys[name]; ok {
		return &InvalidError{"metric name", name, "is already a dimension key", "names that are not dimension keys"}
	}
	return nil
}

// PutDimensions adds a dimension set: every metric is also published with
// these dimensions (after the default ones, unless they are off). A value
// for a key given twice is the last one given. It returns an *InvalidError
// for an invalid name or value, or for a set of more than 30 keys with the
// default dimensions.
func (l *Logger) PutDimensions(dims ...Dimension) error {
	if err := checkDimensions("dimension", dims); err != nil {
		l.rejected.Add(1)
		return fmt.Errorf("put dimensions: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkSetLocked(dims, l.useDefaults); err != nil {
		l.rejected.Add(1)
		return fmt.Errorf("put dimensions: %w", err)
	}
	set := append([]Dimension(nil), dims...)
	for i, s := range l.sets {
		if sameKeys(s, set) {
			l.sets[i] = set
			l.dimsDirty = true
			return nil
		}
	}
	if len(l.sets) >= maxDimensionSets {
		l.rejected.Add(1)
		return fmt.Errorf("put dimensions: %w", &InvalidError{"dimension set", dimensionKeys(dims), "would be set number " + strconv.Itoa(len(l.sets)+1), "at most " + strconv.Itoa(maxDimensionSets) + " dimension sets"})
	}
	l.sets = append(l.sets, set)
	l.dimsDirty = true
	return nil
}

// SetDimensions replaces every dimension set, including the default one,
// with sets. With no sets, metrics have no dimensions.
func (l *Logger) SetDimensions(sets ...[]Dimension) error {
	for _, s := range sets {
		if err := checkDimensions("dimension", s); err != nil {
			l.rejected.Add(1)
			return fmt.Errorf("set dimensions: %w", err)
		}
	}
	if len(sets) > maxDimensionSets {
		l.rejected.Add(1)
		return fmt.Errorf("set dimensions: %w", &InvalidError{"dimension sets", strconv.Itoa(len(sets)), "are too many", "at most " + strconv.Itoa(maxDimensionSets) + " dimension sets"})
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range sets {
		if err := l.checkSetLocked(s, false); err != nil {
			l.rejected.Add(1)
			return fmt.Errorf("set dimensions: %w", err)
		}
	}
	l.sets = l.sets[:0]
	for _, s := range sets {
		dup := false
		for i, have := range l.sets {
			if sameKeys(have, s) {
				l.sets[i], dup = append([]Dimension(nil), s...), true
			}
		}
		if !dup {
			l.sets = append(l.sets, append([]Dimension(nil), s...))
		}
	}
	l.useDefaults = false
	l.dimsDirty = true
	return nil
}

// ResetDimensions removes every dimension set added, and turns the default
// dimensions on or off.
func (l *Logger) ResetDimensions(useDefaults bool) {
	l.mu.Lock()
	l.sets = l.sets[:0]
	l.useDefaults = useDefaults && !l.cfg.NoDefaultDimensions
	if l.useDefaults && l.defaults == nil {
		l.defaults = l.env.defaultDimensions()
	}
	l.dimsDirty = true
	l.mu.Unlock()
}

// checkSetLocked checks a set against the 30-key limit (counting the
// default dimensions when withDefaults) and against buffered metric names.
func (l *Logger) checkSetLocked(dims []Dimension, withDefaults bool) error {
	keys := make(map[string]bool, len(dims)+len(l.defaults))
	if withDefaults {
		for _, d := range l.defaults {
			keys[d.Name] = true
		}
	}
	for _, d := range dims {
		keys[d.Name] = true
		if i, ok := l.index[d.Name]; ok && len(l.metrics[i].values) > 0 {
			return &InvalidError{"dimension name", d.Name, "is already a metric name in this batch", "names that are not metric names"}
		}
	}
	if len(keys) > MaxDimensionSetKeys {
		return &InvalidError{"dimension set", dimensionKeys(dims), "has " + strconv.Itoa(len(keys)) + " keys counting the default dimensions", "at most 30 keys per dimension set"}
	}
	return nil
}

func checkDimensions(field string, dims []Dimension) error {
	for _, d := range dims {
		if f := checkDimensionName(d.Name); !f.ok() {
			return &InvalidError{field + " name", d.Name, f.problem, f.allowed}
		}
		if d.Name == "_aws" {
			return &InvalidError{field + " name", d.Name, "is reserved", "any other name"}
		}
		if f := checkDimensionValue(d.Value); !f.ok() {
			return &InvalidError{field + " value", d.Value, f.problem + " (key " + strconv.Quote(d.Name) + ")", f.allowed}
		}
	}
	if len(dims) > MaxDimensionSetKeys {
		return &InvalidError{field + " set", dimensionKeys(dims), "has " + strconv.Itoa(len(dims)) + " keys", "at most 30 keys per dimension set"}
	}
	return nil
}

func dimensionKeys(dims []Dimension) string {
	b := make([]byte, 0, 16*len(dims))
	for i, d := range dims {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, d.Name...)
	}
	return string(b)
}

func sameKeys(a, b []Dimension) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name {
			return false
		}
	}
	return true
}

// SetProperty adds a member to every document; value is encoded as JSON
// (strings, numbers and booleans without reflection; json.RawMessage as
// is). Dimension and metric members win over a property of the same name.
func (l *Logger) SetProperty(key string, value any) error {
	if err := checkPropertyName(key); err != nil {
		l.rejected.Add(1)
		return fmt.Errorf("set property: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	i := 0
	for i < len(l.props) && l.props[i].Name != key {
		i++
	}
	if i == len(l.props) {
		if len(l.props) >= maxProperties {
			l.rejected.Add(1)
			return fmt.Errorf("set property %q: %w", key, &InvalidError{"property name", key, "would be property number " + strconv.Itoa(maxProperties+1), "at most " + strconv.Itoa(maxProperties) + " properties"})
		}
		l.props = append(l.props, Property{Name: key})
	}
	enc, err := appendValue(l.props[i].Value[:0], value)
	if err != nil {
		if len(l.props[i].Value) == 0 {
			l.props = l.props[:i]
		}
		l.rejected.Add(1)
		return fmt.Errorf("set property %q: %w", key, err)
	}
	l.props[i].Value = enc
	return nil
}

func appendValue(dst []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return jsonstr.AppendJSSafe(dst, v), nil
	case bool:
		return strconv.AppendBool(dst, v), nil
	case int:
		return strconv.AppendInt(dst, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(dst, v, 10), nil
	case uint64:
		return strconv.AppendUint(dst, v, 10), nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return dst, &InvalidError{"property value", strconv.FormatFloat(v, 'g', -1, 64), "is not a finite number", "a JSON value"}
		}
		return appendFloat(dst, v), nil
	case json.RawMessage:
		if !json.Valid(v) {
			return dst, &InvalidError{"property value", string(v), "is not valid JSON", "a JSON value"}
		}
		return append(dst, v...), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("encode property: %w", err)
	}
	return append(dst, b...), nil
}

// SetNamespace sets the CloudWatch namespace of every metric.
func (l *Logger) SetNamespace(ns string) error {
	if f := checkNamespace(ns); !f.ok() {
		l.rejected.Add(1)
		return fmt.Errorf("set namespace: %w", &InvalidError{"namespace", ns, f.problem, f.allowed})
	}
	l.mu.Lock()
	l.namespace = ns
	l.mu.Unlock()
	return nil
}

// SetTimestamp sets the time of the metrics buffered now, until the next
// flush; otherwise they take the flush's time. Flush refuses a timestamp
// more than 14 days before or 2 hours after its now.
func (l *Logger) SetTimestamp(t time.Time) {
	l.mu.Lock()
	l.timestamp = t
	l.mu.Unlock()
}

// refreshDimensionsLocked resolves the dimension sets of the next
// document: the default dimensions put before each set, each key once per
// set, and each key with the last value given for it in any set.
func (l *Logger) refreshDimensionsLocked() {
	if !l.dimsDirty {
		return
	}
	l.dimsDirty = false
	if l.dimKeys == nil {
		l.dimKeys = make(map[string]string)
	}
	clear(l.dimKeys)
	sets := l.sets
	if len(sets) == 0 {
		sets = [][]Dimension{nil}
	}
	for _, set := range sets {
		if l.useDefaults {
			for _, d := range l.defaults {
				l.dimKeys[d.Name] = d.Value
			}
		}
		for _, d := range set {
			l.dimKeys[d.Name] = d.Value
		}
	}
	l.docSets = l.docSets[:0]
	for _, set := range sets {
		var out []Dimension
		add := func(d Dimension) {
			for _, have := range out {
				if have.Name == d.Name {
					return
				}
			}
			out = append(out, Dimension{d.Name, l.dimKeys[d.Name]})
		}
		if l.useDefaults {
			for _, d := range l.defaults {
				add(d)
			}
		}
		for _, d := range set {
			add(d)
		}
		l.docSets = append(l.docSets, out)
	}
}

// Flush writes the buffered metrics to every sink, now, and empties the
// buffer; dimensions, properties and namespace stay. It is FlushAt with
// the current time.
func (l *Logger) Flush(ctx context.Context) error { return l.FlushAt(ctx, time.Now()) }

// FlushAt writes the buffered metrics as documents stamped now (or with
// the time given to SetTimestamp) to every sink, splitting them as the
// limits require. Values that cannot be placed in any valid document (a
// timestamp out of range, properties that leave no room) are counted as
// rejected and reported in the error; sink errors are counted per sink and
// joined in the error.
func (l *Logger) FlushAt(ctx context.Context, now time.Time) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	var (
		docs, rejected int
		err            error
	)
	l.out = l.out[:0]
	l.mu.Lock()
	if l.buffered > 0 {
		doc := l.documentLocked(now)
		l.out, docs, rejected, err = l.enc.encode(l.out, &doc, l.w.limits(now))
		l.resetMetricsLocked()
	}
	l.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("flush metrics: %w", err)
	}
	l.w.count(docs, rejected)
	return errors.Join(err, l.w.writeLines(ctx, l.out, now, false))
}

// documentLocked returns the buffered metrics as a Document, stamped now
// unless SetTimestamp gave a time. It shares the buffers' memory.
func (l *Logger) documentLocked(now time.Time) Document {
	l.refreshDimensionsLocked()
	ts := l.timestamp
	if ts.IsZero() {
		ts = now
	}
	l.docMetrics = l.docMetrics[:0]
	for _, m := range l.metrics {
		if len(m.values) > 0 {
			l.docMetrics = append(l.docMetrics, Metric{Name: m.name, Unit: m.unit, Resolution: m.res, Values: m.values})
		}
	}
	return Document{
		Namespace:  l.namespace,
		Timestamp:  ts,
		Dimensions: l.docSets,
		Properties: l.props,
		Metrics:    l.docMetrics,
	}
}

func (l *Logger) resetMetricsLocked() {
	l.buffered = 0
	l.timestamp = time.Time{}
	clear(l.docMetrics) // drop references to the values
	if len(l.metrics) > maxMetricNames/2 {
		l.metrics = l.metrics[:0]
		clear(l.index)
		return
	}
	for i := range l.metrics {
		l.metrics[i].values = l.metrics[i].values[:0]
	}
}

// Stats reports what l has done so far.
func (l *Logger) Stats() Stats {
	st := l.w.Stats()
	st.Rejected += l.rejected.Load()
	st.Dropped += l.dropped.Load()
	return st
}

// Close flushes what is buffered, then closes every sink. Later puts fail
// with ErrClosed.
func (l *Logger) Close(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	return errors.Join(l.Flush(ctx), l.w.Close(ctx))
}
