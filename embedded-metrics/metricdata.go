package emf

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
)

// Limits of PutMetricData.
const (
	metricDataMaxDatums = 1000      // metrics per call
	metricDataMaxBytes  = 1_048_576 // request body, before compression
	metricDataMaxValues = 150       // distinct values of one datum
	metricDataBatchDocs = 1000      // documents taken per round
)

// MetricDataAPI is the part of the CloudWatch client a MetricDataSink uses.
// *cloudwatch.Client satisfies it.
// A MetricDataSink calls it from one goroutine at a time.
type MetricDataAPI interface {
	PutMetricData(ctx context.Context, in *cloudwatch.PutMetricDataInput, opts ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error)
}

var _ MetricDataAPI = (*cloudwatch.Client)(nil)

// MetricDataOptions configure a MetricDataSink. Zero fields take their
// defaults.
// A MetricDataOptions is a plain value; NewMetricDataSink copies it.
type MetricDataOptions struct {
	// BufferBytes bounds the documents held for delivery, default 8 MiB;
	// a Write that would exceed it is dropped and counted.
	BufferBytes int
	// FlushTimeout bounds a Flush and a Close, default
	// DefaultAWSFlushTimeout: a CloudWatch endpoint that hangs or
	// throttles for good cannot hold up the caller longer. What is not
	// delivered by then is dropped and counted, and the call returns
	// ErrSinkBehind.
	FlushTimeout time.Duration
	Throttle     Throttle
}

func (o *MetricDataOptions) setDefaults() {
	if o.BufferBytes == 0 {
		o.BufferBytes = 8 << 20
	}
	if o.FlushTimeout == 0 {
		o.FlushTimeout = DefaultAWSFlushTimeout
	}
	o.Throttle.setDefaults()
}

// Validate reports the first option out of range, after defaults.
func (o *MetricDataOptions) Validate() error {
	switch {
	case o.BufferBytes < 1:
		return fmt.Errorf("metric_data.buffer_bytes: %d, want more than 0", o.BufferBytes)
	case o.FlushTimeout < 0:
		return fmt.Errorf("metric_data.flush_timeout: %v, want 0 (the default, %v) or more", o.FlushTimeout, DefaultAWSFlushTimeout)
	}
	return o.Throttle.Validate()
}

// MetricDataSink is a Sink that sends the metrics of EMF documents straight
// to CloudWatch with PutMetricData, for hosts with neither the CloudWatch
// agent nor a log group. Each metric directive of a document becomes one
// datum per dimension set and metric, stamped with the document's
// _aws.Timestamp, with its Unit and StorageResolution. Datums that agree
// on all of these (within a document, or across documents sent together)
// are merged: equal values are counted once in Values with their number
// in Counts, at most 150 distinct values per datum. Calls carry one
// namespace, at most 1000 datums and at most 1 MB of request body.
//
// Delivery: a document is Written once every call holding its datums
// succeeded, and Dropped if any of them failed for good (a refused call,
// retries exhausted, an open breaker with DropWhenOpen) or the document
// could not be read or holds what PutMetricData would refuse (then it also
// counts one error); a document whose datums were partly delivered counts
// as Dropped. So is everything the sink holds when a Flush or a Close runs
// out of time (FlushTimeout, or its context's end for Close): the buffered
// documents and the batch in flight, whose call is cut; the sink goes on
// with the documents written after, and the call returns ErrSinkBehind.
// The values of a cut call may still have reached CloudWatch, as the
// request may have arrived before the cut: its documents are counted
// Unconfirmed as LogsSink's are. A call whose response is lost
// is retried, so values may be counted twice (at least once within the
// retry bound).
// The SDK's own retryer is turned off so that Retries and Errors count
// every attempt. A MetricDataSink is safe for concurrent use.
type MetricDataSink struct {
	api      MetricDataAPI
	opts     MetricDataOptions
	thr      *throttler
	counters throttleCounters
	q        *throttleQueue
	aggs     metricDataAggs // the sender's
}

var _ Sink = (*MetricDataSink)(nil)

// NewMetricDataSink returns a MetricDataSink calling api, and starts its
// sender; Close stops it.
func NewMetricDataSink(api MetricDataAPI, opts MetricDataOptions) (*MetricDataSink, error) {
	if api == nil {
		return nil, errors.New("new metric data sink: nil API")
	}
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("new metric data sink: %w", err)
	}
	s := &MetricDataSink{api: api, opts: opts}
	s.thr = newThrottler(opts.Throttle, &s.counters)
	s.q = newThrottleQueue("metric data", opts.BufferBytes, metricDataBatchDocs, opts.FlushTimeout, s.thr, &s.counters, s.deliver)
	return s, nil
}

// Write buffers doc for delivery. It drops and counts the document, and
// says why, when the buffer is full, the sink is closed or the breaker is
// open with DropWhenOpen.
func (s *MetricDataSink) Write(_ context.Context, doc []byte) error { return s.q.write(doc) }

// Flush waits until every document written before it is delivered or
// dropped, or ctx ends. If that takes longer than FlushTimeout, what the
// sink holds is dropped and counted, and Flush returns ErrSinkBehind,
// saying how many of its documents were not delivered.
func (s *MetricDataSink) Flush(ctx context.Context) error { return s.q.flush(ctx) }

// Close delivers what is buffered and stops the sender. If ctx ends first,
// or FlushTimeout passes, what is left is dropped and counted; past
// FlushTimeout Close returns ErrSinkBehind.
func (s *MetricDataSink) Close(ctx context.Context) error { return s.q.close(ctx) }

// makeRoom waits until doc fits in the buffer, or FlushTimeout passes (see
// WriterOptions.WaitForRoom).
func (s *MetricDataSink) makeRoom(ctx context.Context, doc []byte) error {
	return s.q.awaitRoom(ctx, len(doc))
}

// Stats reports the sink's counters; Retries and Errors count calls.
func (s *MetricDataSink) Stats() SinkStats { return s.q.stats() }

// metricDataKey identifies the datums that may be merged.
type metricDataKey struct {
	namespace, name, dims, unit string
	resolution                  int32 // 0 for Standard, which is not sent
	ts                          int64
}

// metricDataAgg is one merged datum before it is split by value count.
type metricDataAgg struct {
	key    metricDataKey
	dims   []types.Dimension
	values []float64
	counts []float64
	index  map[float64]int
	docs   []int
}

func (a *metricDataAgg) add(v float64, doc int) {
	if i, ok := a.index[v]; ok {
		a.counts[i]++
	} else {
		a.index[v] = len(a.values)
		a.values = append(a.values, v)
		a.counts = append(a.counts, 1)
	}
	if len(a.docs) == 0 || a.docs[len(a.docs)-1] != doc {
		a.docs = append(a.docs, doc)
	}
}

// metricDataAggs merges the datums of the documents of one batch, in order
// of first appearance. It is used by one goroutine at a time; reset
// readies it for the next batch.
type metricDataAggs struct {
	byKey map[metricDataKey]*metricDataAgg
	order []*metricDataAgg

	d       jdoc
	dims    map[string]string   // dimension keys, interned
	pending []metricDataPending // the datums of the document being read
	scratch []byte
}

// metricDataPending is one datum of a document: its key, and the nodes of
// its dimension set and its value.
type metricDataPending struct {
	key        metricDataKey
	set, value int32
}

func (m *metricDataAggs) reset() {
	if m.byKey == nil {
		m.byKey, m.dims = make(map[metricDataKey]*metricDataAgg), make(map[string]string)
	}
	clear(m.byKey)
	clear(m.order)
	m.order = m.order[:0]
	if len(m.dims) > 1<<16 {
		clear(m.dims)
	}
}

// addDoc adds the datums of document i, or none if it cannot be read or
// PutMetricData would refuse one of them, so that one bad document does
// not fail a call that carries others.
func (m *metricDataAggs) addDoc(doc string, i int, now time.Time) error {
	if err := m.read(doc, now); err != nil {
		return fmt.Errorf("read document: %w", err)
	}
	d := &m.d
	for _, p := range m.pending {
		a := m.byKey[p.key]
		if a == nil {
			a = &metricDataAgg{key: p.key, dims: m.dimensions(p.set), index: make(map[float64]int)}
			m.byKey[p.key] = a
			m.order = append(m.order, a)
		}
		if d.nodes[p.value].kind == jNumber {
			v, _ := d.metricValue(p.value)
			a.add(v, i)
			continue
		}
		for _, e := range d.elems(p.value) {
			v, _ := d.metricValue(e)
			a.add(v, i)
		}
	}
	return nil
}

// read decodes doc into m.d and its datums into m.pending, checking what
// PutMetricData checks.
func (m *metricDataAggs) read(doc string, now time.Time) error {
	d := &m.d
	m.pending = m.pending[:0]
	if err := d.decode(doc); err != nil {
		return err
	}
	var root jpath
	if k := d.nodes[0].kind; k != jObject {
		return metricDataFault(root, "is "+k.String(), allowedJSON)
	}
	awsPath := root.member("_aws")
	aws, err := m.need(0, awsPath, jObject, allowedAws)
	if err != nil {
		return err
	}
	ts := now.UnixMilli()
	if t, ok := d.member(aws, "Timestamp"); ok {
		n, err := d.int(t)
		if d.nodes[t].kind != jNumber || err != nil {
			return metricDataFault(awsPath.member("Timestamp"), "is not an integer", allowedTimestamp)
		}
		ts = n
	}
	cwmPath := awsPath.member("CloudWatchMetrics")
	cwm, err := m.need(aws, cwmPath, jArray, allowedDirectives)
	if err != nil {
		return err
	}
	for i, dir := range d.elems(cwm) {
		if err := m.directive(cwmPath.index(i), dir, ts); err != nil {
			return err
		}
	}
	return nil
}

func (m *metricDataAggs) directive(path jpath, dir int32, ts int64) error {
	d := &m.d
	if k := d.nodes[dir].kind; k != jObject {
		return metricDataFault(path, "is "+k.String(), allowedDirective)
	}
	ns, err := m.need(dir, path.member("Namespace"), jString, allowedNamespace)
	if err != nil {
		return err
	}
	namespace := d.text(ns)
	if f := checkNamespace(namespace); !f.ok() {
		return metricDataFault(path.member("Namespace"), f.problem, f.allowed)
	}
	dimsPath, metricsPath := path.member("Dimensions"), path.member("Metrics")
	sets, err := m.need(dir, dimsPath, jArray, allowedDimensions)
	if err != nil {
		return err
	}
	defs, err := m.need(dir, metricsPath, jArray, allowedMetrics)
	if err != nil {
		return err
	}
	for i, set := range d.elems(sets) {
		dims, err := m.dimensionKey(dimsPath.index(i), set)
		if err != nil {
			return err
		}
		for j, def := range d.elems(defs) {
			key, value, err := m.metric(metricsPath.index(j), def)
			if err != nil {
				return err
			}
			if d.nodes[value].kind == jArray && d.nodes[value].n == 0 {
				continue // no values, no datum
			}
			key.namespace, key.dims, key.ts = namespace, dims, ts
			m.pending = append(m.pending, metricDataPending{key: key, set: set, value: value})
		}
	}
	return nil
}

// dimensionKey checks the dimension set and returns its keys and values
// as one string, interned.
func (m *metricDataAggs) dimensionKey(path jpath, set int32) (string, error) {
	d := &m.d
	if k := d.nodes[set].kind; k != jArray {
		return "", metricDataFault(path, "is "+k.String(), allowedDimSet)
	}
	b := m.scratch[:0]
	for j, key := range d.elems(set) {
		if k := d.nodes[key].kind; k != jString {
			return "", metricDataFault(path.index(j), "is "+k.String(), allowedDimName)
		}
		name := d.text(key)
		if f := checkDimensionName(name); !f.ok() {
			return "", metricDataFault(path.index(j), f.problem, f.allowed)
		}
		v, err := m.need(0, jpath{}.member(name), jString, allowedDimValue)
		if err != nil {
			return "", err
		}
		value := d.text(v)
		if f := checkDimensionValue(value); !f.ok() {
			return "", metricDataFault(jpath{}.member(name), f.problem, f.allowed)
		}
		b = append(append(append(append(b, name...), 0), value...), 0)
	}
	m.scratch = b
	dims, ok := m.dims[string(b)]
	if !ok {
		dims = string(b)
		m.dims[dims] = dims
	}
	return dims, nil
}

// dimensions returns the Dimension values of a dimension set already read
// by dimensionKey.
func (m *metricDataAggs) dimensions(set int32) []types.Dimension {
	d := &m.d
	dims := make([]types.Dimension, 0, d.nodes[set].n)
	for _, key := range d.elems(set) {
		name := d.text(key)
		v, _ := d.member(0, name)
		dims = append(dims, types.Dimension{Name: aws.String(name), Value: aws.String(d.text(v))})
	}
	return dims
}

// metric checks a metric definition and its value, and returns its part
// of the key and the node of its value.
func (m *metricDataAggs) metric(path jpath, def int32) (metricDataKey, int32, error) {
	d := &m.d
	var key metricDataKey
	if k := d.nodes[def].kind; k != jObject {
		return key, 0, metricDataFault(path, "is "+k.String(), allowedDefinition)
	}
	name, err := m.need(def, path.member("Name"), jString, allowedMetric)
	if err != nil {
		return key, 0, err
	}
	key.name = d.text(name)
	if f := checkMetricName(key.name); !f.ok() {
		return key, 0, metricDataFault(path.member("Name"), f.problem, f.allowed)
	}
	if u, ok := d.member(def, "Unit"); ok {
		if d.nodes[u].kind != jString || d.text(u) == "" || !Unit(d.text(u)).Valid() {
			return key, 0, metricDataFault(path.member("Unit"), "is not a unit", allowedUnits())
		}
		key.unit = d.text(u)
	}
	if r, ok := d.member(def, "StorageResolution"); ok {
		n, err := d.int(r)
		if d.nodes[r].kind != jNumber || err != nil || n != int64(High) && n != int64(Standard) {
			return key, 0, metricDataFault(path.member("StorageResolution"), "is not 1 or 60", allowedResolution)
		}
		if n == int64(High) {
			key.resolution = int32(High)
		}
	}
	vp := jpath{}.member(key.name)
	v, ok := d.member(0, key.name)
	if !ok {
		return key, 0, metricDataFault(vp, "is missing", allowedMetricVal)
	}
	switch d.nodes[v].kind {
	case jNumber:
		if _, f := d.metricValue(v); !f.ok() {
			return key, 0, metricDataFault(vp, f.problem, f.allowed)
		}
	case jArray:
		for i, e := range d.elems(v) {
			if d.nodes[e].kind != jNumber {
				return key, 0, metricDataFault(vp.index(i), "is "+d.nodes[e].kind.String(), allowedValue)
			}
			if _, f := d.metricValue(e); !f.ok() {
				return key, 0, metricDataFault(vp.index(i), f.problem, f.allowed)
			}
		}
	default:
		return key, 0, metricDataFault(vp, "is "+d.nodes[v].kind.String(), allowedMetricVal)
	}
	return key, v, nil
}

// need returns the member of object o at path, which must be of kind.
func (m *metricDataAggs) need(o int32, path jpath, kind jkind, allowed string) (int32, error) {
	v, ok := m.d.member(o, path.steps[path.n-1].name)
	switch {
	case !ok:
		return 0, metricDataFault(path, "is missing", allowed)
	case m.d.nodes[v].kind != kind:
		return 0, metricDataFault(path, "is "+m.d.nodes[v].kind.String(), allowed)
	}
	return v, nil
}

func metricDataFault(path jpath, problem, allowed string) error {
	return errors.New(Violation{Path: path.String(), Problem: problem, Allowed: allowed}.String())
}

// metricDataCall is one PutMetricData call and the documents it carries.
type metricDataCall struct {
	in   cloudwatch.PutMetricDataInput
	docs []int
}

// metricDataCalls splits the merged datums into calls: one namespace each,
// in order of first appearance, within the datum and size limits.
func metricDataCalls(aggs []*metricDataAgg, ndocs int) []*metricDataCall {
	var (
		calls  []*metricDataCall
		open   = make(map[string]*metricDataCall) // the call being filled, by namespace
		sizes  = make(map[*metricDataCall]int)
		inCall = make([]*metricDataCall, ndocs) // the last call a document was added to
	)
	for _, a := range aggs {
		for lo := 0; lo < len(a.values); lo += metricDataMaxValues {
			hi := min(lo+metricDataMaxValues, len(a.values))
			d := types.MetricDatum{
				MetricName: aws.String(a.key.name),
				Dimensions: a.dims,
				Timestamp:  aws.Time(time.UnixMilli(a.key.ts)),
				Unit:       types.StandardUnit(a.key.unit),
				Values:     a.values[lo:hi],
				Counts:     a.counts[lo:hi],
			}
			if a.key.resolution != 0 {
				d.StorageResolution = aws.Int32(a.key.resolution)
			}
			size := metricDataDatumSize(&d)
			c := open[a.key.namespace]
			if c == nil || len(c.in.MetricData) == metricDataMaxDatums || sizes[c]+size > metricDataMaxBytes {
				c = &metricDataCall{in: cloudwatch.PutMetricDataInput{Namespace: aws.String(a.key.namespace)}}
				open[a.key.namespace] = c
				sizes[c] = metricDataEnvelopeSize(a.key.namespace)
				calls = append(calls, c)
			}
			c.in.MetricData = append(c.in.MetricData, d)
			sizes[c] += size
			for _, doc := range a.docs {
				if inCall[doc] != c {
					inCall[doc] = c
					c.docs = append(c.docs, doc)
				}
			}
		}
	}
	return calls
}

// deliver turns docs into datums and puts them. It runs on the sender
// goroutine only.
func (s *MetricDataSink) deliver(ctx context.Context, docs []string) []docFate {
	fates := make([]docFate, len(docs))
	aggs := &s.aggs
	aggs.reset()
	now := s.opts.Throttle.Now()
	for i, doc := range docs {
		if err := aggs.addDoc(doc, i, now); err != nil {
			fates[i] = docDropped
			s.counters.errors.Add(1)
		}
	}
	for _, c := range metricDataCalls(aggs.order, len(docs)) {
		unanswered, err := s.thr.do(ctx, func(ctx context.Context) error {
			_, err := s.api.PutMetricData(ctx, &c.in, metricDataCallOptions)
			return err
		})
		for _, d := range c.docs {
			markFate(fates, d, callFate(unanswered, err))
		}
	}
	return fates
}

// metricDataCallOptions turn off the client's retryer: the sink retries,
// and counts, every attempt itself.
func metricDataCallOptions(o *cloudwatch.Options) { o.Retryer = aws.NopRetryer{} }

// The sizes below are those of the request body in Smithy RPC v2 CBOR as
// the SDK writes it: structures and lists of indefinite length (a start
// byte and a break byte), member names as text keys, doubles in 9 bytes,
// timestamps as tag 1 on a double.

// metricDataEnvelopeSize is the size of a request without its datums.
func metricDataEnvelopeSize(namespace string) int {
	return 2 + cborTextSize("MetricData") + 2 + cborTextSize("Namespace") + cborTextSize(namespace)
}

// metricDataDatumSize is the size of one datum in the MetricData list.
func metricDataDatumSize(d *types.MetricDatum) int {
	n := 2
	if d.Counts != nil {
		n += cborTextSize("Counts") + 2 + 9*len(d.Counts)
	}
	if d.Dimensions != nil {
		n += cborTextSize("Dimensions") + 2
		for _, dim := range d.Dimensions {
			n += 2 + cborTextSize("Name") + cborTextSize(aws.ToString(dim.Name)) + cborTextSize("Value") + cborTextSize(aws.ToString(dim.Value))
		}
	}
	if d.MetricName != nil {
		n += cborTextSize("MetricName") + cborTextSize(*d.MetricName)
	}
	if d.StorageResolution != nil {
		n += cborTextSize("StorageResolution") + cborArgSize(uint64(*d.StorageResolution))
	}
	if d.Timestamp != nil {
		n += cborTextSize("Timestamp") + 1 + 9
	}
	if d.Unit != "" {
		n += cborTextSize("Unit") + cborTextSize(string(d.Unit))
	}
	if d.Value != nil {
		n += cborTextSize("Value") + 9
	}
	if d.Values != nil {
		n += cborTextSize("Values") + 2 + 9*len(d.Values)
	}
	return n
}

func cborTextSize(s string) int { return cborArgSize(uint64(len(s))) + len(s) }

// cborArgSize is the size of a CBOR head carrying argument v.
func cborArgSize(v uint64) int {
	switch {
	case v < 24:
		return 1
	case v < 1<<8:
		return 2
	case v < 1<<16:
		return 3
	case v < 1<<32:
		return 5
	}
	return 9
}
