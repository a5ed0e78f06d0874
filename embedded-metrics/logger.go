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
	"unicode/utf8"
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

var (
	// ErrBufferFull is returned when Config.MaxBufferedValues values wait
	// for a flush; the value was dropped and counted.
	ErrBufferFull = errors.New("metric buffer is full")
	// ErrClosed is returned by calls on a closed Logger.
	ErrClosed = errors.New("logger is closed")
)

// Limits of our own, so that memory stays bounded between flushes.
const (
	maxDimensionSets = 30
	maxProperties    = 256
	maxMetricNames   = 10000
)

// Logger collects metric values, dimensions and properties and, on Flush,
// writes them as EMF documents to its sinks, split as the limits require.
// It is safe for concurrent use. Create one with New.
type Logger struct {
	cfg   Config
	env   Environment
	sinks []*sinkState

	mu          sync.Mutex // guards the fields up to flushMu
	closed      bool
	namespace   string
	useDefaults bool
	defaults    []Dimension
	sets        [][]Dimension // custom dimension sets, without defaults
	props       []property
	metrics     []metric
	index       map[string]int // metric name → index in metrics
	buffered    int
	timestamp   time.Time
	dimsDirty   bool
	dimKeys     map[string]string // dimension key → value, over all sets
	dimSetsJSON []byte            // [["a","b"],["a"]]
	dimMembers  []byte            // "a":"x","b":"y"

	flushMu sync.Mutex // serialises flushes; guards the buffers below
	out     []byte     // the documents of one flush, back to back
	ends    []int      // end offset of each document in out
	defs    []byte     // scratch: metric definitions of one document
	head    []byte     // scratch: "_aws" member up to the definitions

	documents atomic.Uint64
	split     atomic.Uint64
	rejected  atomic.Uint64
	dropped   atomic.Uint64
}

type metric struct {
	name   string
	unit   Unit
	res    Resolution
	values []float64
	sent   int // values already placed in documents during a flush
	doc    int // last document of this flush that holds the metric
}

type property struct {
	key   string
	value []byte // encoded JSON value
}

type sinkState struct {
	sink                              Sink
	written, split, rejected, dropped atomic.Uint64
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
	l := &Logger{
		cfg:         cfg,
		env:         env,
		namespace:   cfg.Namespace,
		useDefaults: !cfg.NoDefaultDimensions,
		index:       make(map[string]int),
		dimsDirty:   true,
	}
	for _, s := range sinks {
		l.sinks = append(l.sinks, &sinkState{sink: s})
	}
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
	if math.IsNaN(value) || math.IsInf(value, 0) || math.Abs(value) > maxMetricValue ||
		value != 0 && math.Abs(value) < minMetricMagnitude {
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
	if key == "" || key == "_aws" || !utf8.ValidString(key) {
		l.rejected.Add(1)
		return fmt.Errorf("set property: %w", &InvalidError{"property name", key, "is empty, reserved or not UTF-8", "valid UTF-8 other than \"\" and \"_aws\""})
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	i := 0
	for i < len(l.props) && l.props[i].key != key {
		i++
	}
	if i == len(l.props) {
		if len(l.props) >= maxProperties {
			l.rejected.Add(1)
			return fmt.Errorf("set property %q: %w", key, &InvalidError{"property name", key, "would be property number " + strconv.Itoa(maxProperties+1), "at most " + strconv.Itoa(maxProperties) + " properties"})
		}
		l.props = append(l.props, property{key: key})
	}
	enc, err := appendValue(l.props[i].value[:0], value)
	if err != nil {
		if len(l.props[i].value) == 0 {
			l.props = l.props[:i]
		}
		l.rejected.Add(1)
		return fmt.Errorf("set property %q: %w", key, err)
	}
	l.props[i].value = enc
	return nil
}

func appendValue(dst []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return appendString(dst, v), nil
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

// refreshDimensionsLocked rebuilds the encoded dimension sets and members.
func (l *Logger) refreshDimensionsLocked() {
	if !l.dimsDirty {
		return
	}
	l.dimsDirty = false
	if l.dimKeys == nil {
		l.dimKeys = make(map[string]string)
	}
	clear(l.dimKeys)
	var order []string
	note := func(d Dimension) {
		if _, ok := l.dimKeys[d.Name]; !ok {
			order = append(order, d.Name)
		}
		l.dimKeys[d.Name] = d.Value
	}
	b := append(l.dimSetsJSON[:0], '[')
	writeSet := func(withDefaults bool, set []Dimension) {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, '[')
		seen := make(map[string]bool, len(set)+len(l.defaults))
		n := 0
		add := func(d Dimension) {
			note(d)
			if seen[d.Name] {
				return
			}
			seen[d.Name] = true
			if n > 0 {
				b = append(b, ',')
			}
			b = appendString(b, d.Name)
			n++
		}
		if withDefaults {
			for _, d := range l.defaults {
				add(d)
			}
		}
		for _, d := range set {
			add(d)
		}
		b = append(b, ']')
	}
	switch {
	case len(l.sets) == 0:
		writeSet(l.useDefaults, nil)
	default:
		for _, s := range l.sets {
			writeSet(l.useDefaults, s)
		}
	}
	l.dimSetsJSON = append(b, ']')
	m := l.dimMembers[:0]
	for i, k := range order {
		if i > 0 {
			m = append(m, ',')
		}
		m = appendString(m, k)
		m = append(m, ':')
		m = appendString(m, l.dimKeys[k])
	}
	l.dimMembers = m
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
	l.mu.Lock()
	err := l.encodeLocked(now)
	l.mu.Unlock()
	if n := len(l.ends); n > 0 {
		l.documents.Add(uint64(n))
		l.split.Add(uint64(n - 1))
	}
	return errors.Join(err, l.writeLocked(ctx, now))
}

// writeLocked hands the encoded documents to every sink.
func (l *Logger) writeLocked(ctx context.Context, now time.Time) error {
	var errs []error
	start := 0
	for i, end := range l.ends {
		doc := l.out[start:end]
		start = end
		if l.cfg.ValidateDocuments {
			if vs := Validate(doc, now, ValidateOptions{MaxSize: l.cfg.MaxDocumentSize}); len(vs) > 0 {
				l.rejected.Add(1)
				for _, s := range l.sinks {
					s.rejected.Add(1)
				}
				errs = append(errs, fmt.Errorf("validate document %d: %d violations, first %s", i, len(vs), vs[0]))
				continue
			}
		}
		for _, s := range l.sinks {
			if err := s.sink.Write(ctx, doc); err != nil {
				s.dropped.Add(1)
				if len(errs) < 10 {
					errs = append(errs, fmt.Errorf("write document to %s: %w", s.sink.Stats().Sink, err))
				}
				continue
			}
			s.written.Add(1)
			if i > 0 {
				s.split.Add(1)
			}
		}
	}
	return errors.Join(errs...)
}

// encodeLocked builds the documents of one flush into l.out and l.ends and
// empties the metric buffer.
func (l *Logger) encodeLocked(now time.Time) error {
	l.out, l.ends = l.out[:0], l.ends[:0]
	if l.buffered == 0 {
		return nil
	}
	defer l.resetMetricsLocked()
	ts := l.timestamp
	if ts.IsZero() {
		ts = now
	}
	if ts.Before(now.Add(-MaxTimestampPast)) || ts.After(now.Add(MaxTimestampFuture)) {
		l.rejected.Add(1)
		return fmt.Errorf("flush metrics: %w", &InvalidError{"timestamp", ts.UTC().Format(time.RFC3339Nano),
			"is out of range at " + now.UTC().Format(time.RFC3339), "14 days before to 2 hours after the flush"})
	}
	l.refreshDimensionsLocked()

	// "_aws" member up to the metric definitions, and what closes it.
	h := append(l.head[:0], `"_aws":{"Timestamp":`...)
	h = strconv.AppendInt(h, ts.UnixMilli(), 10)
	h = append(h, `,"CloudWatchMetrics":[{"Namespace":`...)
	h = appendString(h, l.namespace)
	h = append(h, `,"Dimensions":`...)
	h = append(h, l.dimSetsJSON...)
	h = append(h, `,"Metrics":[`...)
	l.head = h
	const tail = `]}]}}`
	max := int(l.cfg.MaxDocumentSize)

	var (
		docStart int
		docNo    int
		nDefs    int
		errs     []error
	)
	open := func() {
		docNo++
		docStart = len(l.out)
		l.out = append(l.out, '{')
		l.out = append(l.out, l.dimMembers...)
		for _, p := range l.props {
			if _, ok := l.dimKeys[p.key]; ok {
				continue
			}
			if i, ok := l.index[p.key]; ok && len(l.metrics[i].values) > 0 {
				continue
			}
			if len(l.out) > docStart+1 {
				l.out = append(l.out, ',')
			}
			l.out = appendString(l.out, p.key)
			l.out = append(l.out, ':')
			l.out = append(l.out, p.value...)
		}
		l.defs, nDefs = l.defs[:0], 0
	}
	closeDoc := func() {
		if nDefs == 0 {
			l.out = l.out[:docStart]
			return
		}
		l.out = append(l.out, ',')
		l.out = append(l.out, l.head...)
		l.out = append(l.out, l.defs...)
		l.out = append(l.out, tail...)
		l.ends = append(l.ends, len(l.out))
	}
	for i := range l.metrics {
		l.metrics[i].sent, l.metrics[i].doc = 0, 0
	}
	open()
	for left := l.buffered; left > 0; {
		for i := range l.metrics {
			m := &l.metrics[i]
			if m.sent >= len(m.values) {
				continue
			}
			if nDefs == MaxMetricsPerDirective || m.doc == docNo {
				closeDoc()
				open()
			}
			n := min(MaxValuesPerMetric, len(m.values)-m.sent)
			for {
				mark, dmark := len(l.out), len(l.defs)
				l.out = appendMetricMember(l.out, len(l.out) > docStart+1, m.name, m.values[m.sent:m.sent+n])
				l.defs = appendDefinition(l.defs, nDefs > 0, m)
				if len(l.out)-docStart+1+len(l.head)+len(l.defs)+len(tail) <= max {
					break
				}
				l.out, l.defs = l.out[:mark], l.defs[:dmark]
				switch {
				case nDefs > 0:
					closeDoc()
					open()
				case n > 1:
					n = (n + 1) / 2
				default:
					n = 0
				}
				if n == 0 {
					break
				}
			}
			if n == 0 {
				rest := len(m.values) - m.sent
				l.rejected.Add(1)
				errs = append(errs, fmt.Errorf("flush metric %q: %w", m.name, &InvalidError{"document size", strconv.Itoa(len(l.out) - docStart), "leaves no room for one value of the metric (" + strconv.Itoa(rest) + " values refused)", "properties and dimensions that fit in " + strconv.Itoa(max) + " bytes with the metrics"}))
				m.sent = len(m.values)
				left -= rest
				continue
			}
			m.sent += n
			m.doc = docNo
			nDefs++
			left -= n
		}
	}
	closeDoc()
	return errors.Join(errs...)
}

func (l *Logger) resetMetricsLocked() {
	l.buffered = 0
	l.timestamp = time.Time{}
	if len(l.metrics) > maxMetricNames/2 {
		l.metrics = l.metrics[:0]
		clear(l.index)
		return
	}
	for i := range l.metrics {
		l.metrics[i].values = l.metrics[i].values[:0]
	}
}

func appendMetricMember(dst []byte, comma bool, name string, values []float64) []byte {
	if comma {
		dst = append(dst, ',')
	}
	dst = appendString(dst, name)
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

func appendDefinition(dst []byte, comma bool, m *metric) []byte {
	if comma {
		dst = append(dst, ',')
	}
	dst = append(dst, `{"Name":`...)
	dst = appendString(dst, m.name)
	if m.unit != "" {
		dst = append(dst, `,"Unit":`...)
		dst = appendString(dst, string(m.unit))
	}
	if m.res == High {
		dst = append(dst, `,"StorageResolution":1`...)
	}
	return append(dst, '}')
}

// Stats is a Logger's self-report.
// It is a plain value, a snapshot, safe for concurrent use.
type Stats struct {
	Documents uint64       // documents built
	Split     uint64       // of those, extra documents created by splitting
	Rejected  uint64       // calls and documents refused as invalid
	Dropped   uint64       // values refused because the buffer was full or the logger closed
	Sinks     []SinkReport // one per sink, in the order given to New
}

// SinkReport is what a Logger did with one sink.
// It is a plain value, a snapshot, safe for concurrent use.
type SinkReport struct {
	Written  uint64    // documents the sink accepted
	Split    uint64    // of those, extra documents created by splitting
	Rejected uint64    // documents withheld because validation failed
	Dropped  uint64    // documents the sink refused with an error
	Sink     SinkStats // the sink's own report
}

// Stats reports what l has done so far.
func (l *Logger) Stats() Stats {
	st := Stats{
		Documents: l.documents.Load(),
		Split:     l.split.Load(),
		Rejected:  l.rejected.Load(),
		Dropped:   l.dropped.Load(),
		Sinks:     make([]SinkReport, len(l.sinks)),
	}
	for i, s := range l.sinks {
		st.Sinks[i] = SinkReport{
			Written:  s.written.Load(),
			Split:    s.split.Load(),
			Rejected: s.rejected.Load(),
			Dropped:  s.dropped.Load(),
			Sink:     s.sink.Stats(),
		}
	}
	return st
}

// Close flushes what is buffered, then closes every sink. Later puts fail
// with ErrClosed.
func (l *Logger) Close(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	err := l.Flush(ctx)
	errs := []error{err}
	for _, s := range l.sinks {
		if err := s.sink.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", s.sink.Stats().Sink, err))
		}
	}
	return errors.Join(errs...)
}
