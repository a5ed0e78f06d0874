package emf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
type MetricDataAPI interface {
	PutMetricData(ctx context.Context, in *cloudwatch.PutMetricDataInput, opts ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error)
}

var _ MetricDataAPI = (*cloudwatch.Client)(nil)

// MetricDataOptions configure a MetricDataSink. Zero fields take their
// defaults.
type MetricDataOptions struct {
	// BufferBytes bounds the documents held for delivery, default 8 MiB;
	// a Write that would exceed it is dropped and counted.
	BufferBytes int
	Throttle    Throttle
}

func (o *MetricDataOptions) setDefaults() {
	if o.BufferBytes == 0 {
		o.BufferBytes = 8 << 20
	}
	o.Throttle.setDefaults()
}

// Validate reports the first option out of range, after defaults.
func (o *MetricDataOptions) Validate() error {
	if o.BufferBytes < 1 {
		return fmt.Errorf("metric_data.buffer_bytes: %d, want more than 0", o.BufferBytes)
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
// retries exhausted, an open breaker with DropWhenOpen, Close out of time)
// or the document could not be read; a document whose datums were partly
// delivered counts as Dropped. A call whose response is lost is retried,
// so values may be counted twice (at least once within the retry bound).
// The SDK's own retryer is turned off so that Retries and Errors count
// every attempt. A MetricDataSink is safe for concurrent use.
type MetricDataSink struct {
	api      MetricDataAPI
	opts     MetricDataOptions
	thr      *throttler
	counters throttleCounters
	q        *throttleQueue
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
	s.q = newThrottleQueue("metric data", opts.BufferBytes, metricDataBatchDocs, s.thr, &s.counters, s.deliver)
	return s, nil
}

// Write buffers doc for delivery. It drops and counts the document, and
// says why, when the buffer is full, the sink is closed or the breaker is
// open with DropWhenOpen.
func (s *MetricDataSink) Write(_ context.Context, doc []byte) error { return s.q.write(doc) }

// Flush waits until every document written before it is delivered or
// dropped, or ctx ends.
func (s *MetricDataSink) Flush(ctx context.Context) error { return s.q.flush(ctx) }

// Close delivers what is buffered and stops the sender. If ctx ends first,
// what is left is dropped and counted.
func (s *MetricDataSink) Close(ctx context.Context) error { return s.q.close(ctx) }

// Stats reports the sink's counters; Retries and Errors count calls.
func (s *MetricDataSink) Stats() SinkStats { return s.q.stats() }

// metricDataDoc is the part of an EMF document that PutMetricData needs.
type metricDataDoc struct {
	AWS struct {
		Timestamp         int64 `json:"Timestamp"`
		CloudWatchMetrics []struct {
			Namespace  string     `json:"Namespace"`
			Dimensions [][]string `json:"Dimensions"`
			Metrics    []struct {
				Name              string `json:"Name"`
				Unit              string `json:"Unit"`
				StorageResolution int32  `json:"StorageResolution"`
			} `json:"Metrics"`
		} `json:"CloudWatchMetrics"`
	} `json:"_aws"`
}

// metricDataKey identifies the datums that may be merged.
type metricDataKey struct {
	namespace, name, dims, unit string
	resolution                  int32
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

// metricDataAggs merges the datums of many documents, in order of first
// appearance.
type metricDataAggs struct {
	byKey map[metricDataKey]*metricDataAgg
	order []*metricDataAgg
}

// addDoc adds the datums of one document, or none if it cannot be read.
func (m *metricDataAggs) addDoc(doc []byte, i int, now time.Time) error {
	var d metricDataDoc
	if err := json.Unmarshal(doc, &d); err != nil {
		return fmt.Errorf("read document: %w", err)
	}
	var root map[string]json.RawMessage
	if err := json.Unmarshal(doc, &root); err != nil {
		return fmt.Errorf("read document: %w", err)
	}
	ts := d.AWS.Timestamp
	if ts == 0 {
		ts = now.UnixMilli()
	}
	type datum struct {
		key    metricDataKey
		dims   []types.Dimension
		values []float64
	}
	var (
		datums []datum
		b      strings.Builder
	)
	for _, dir := range d.AWS.CloudWatchMetrics {
		for _, set := range dir.Dimensions {
			dims := make([]types.Dimension, len(set))
			b.Reset()
			for j, name := range set {
				var v string
				if err := json.Unmarshal(root[name], &v); err != nil {
					return fmt.Errorf("read dimension %q: %w", name, err)
				}
				dims[j] = types.Dimension{Name: aws.String(name), Value: aws.String(v)}
				b.WriteString(name)
				b.WriteByte(0)
				b.WriteString(v)
				b.WriteByte(0)
			}
			for _, met := range dir.Metrics {
				values, err := metricDataValues(root[met.Name])
				if err != nil {
					return fmt.Errorf("read metric %q: %w", met.Name, err)
				}
				datums = append(datums, datum{key: metricDataKey{namespace: dir.Namespace, name: met.Name, dims: b.String(),
					unit: met.Unit, resolution: met.StorageResolution, ts: ts}, dims: dims, values: values})
			}
		}
	}
	for _, dt := range datums {
		a := m.byKey[dt.key]
		if a == nil {
			a = &metricDataAgg{key: dt.key, dims: dt.dims, index: make(map[float64]int)}
			m.byKey[dt.key] = a
			m.order = append(m.order, a)
		}
		for _, v := range dt.values {
			a.add(v, i)
		}
	}
	return nil
}

// metricDataValues reads a metric's value: a number or an array of numbers.
func metricDataValues(raw json.RawMessage) ([]float64, error) {
	if len(raw) == 0 {
		return nil, errors.New("missing")
	}
	if raw[0] == '[' {
		var vs []float64
		err := json.Unmarshal(raw, &vs)
		return vs, err
	}
	var v float64
	err := json.Unmarshal(raw, &v)
	return []float64{v}, err
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

// deliver turns docs into datums and puts them.
func (s *MetricDataSink) deliver(ctx context.Context, docs [][]byte) []bool {
	dropped := make([]bool, len(docs))
	aggs := metricDataAggs{byKey: make(map[metricDataKey]*metricDataAgg)}
	now := s.opts.Throttle.Now()
	for i, doc := range docs {
		if err := aggs.addDoc(doc, i, now); err != nil {
			dropped[i] = true
			s.counters.errors.Add(1)
		}
	}
	for _, c := range metricDataCalls(aggs.order, len(docs)) {
		err := s.thr.do(ctx, func(ctx context.Context) error {
			_, err := s.api.PutMetricData(ctx, &c.in, metricDataCallOptions)
			return err
		})
		if err != nil {
			for _, d := range c.docs {
				dropped[d] = true
			}
		}
	}
	return dropped
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
