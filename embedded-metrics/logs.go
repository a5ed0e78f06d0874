package emf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Limits of PutLogEvents.
const (
	logsMaxBatchBytes  = 1_048_576 // sum of UTF-8 message sizes plus logsEventOverhead each
	logsEventOverhead  = 26
	logsMaxBatchEvents = 10_000
	logsMaxSpan        = 24 * time.Hour // between the first and last event of a batch
)

// LogsAPI is the part of the CloudWatch Logs client a LogsSink uses.
// *cloudwatchlogs.Client satisfies it.
// A LogsSink calls it from one goroutine at a time.
type LogsAPI interface {
	PutLogEvents(ctx context.Context, in *cloudwatchlogs.PutLogEventsInput, opts ...func(*cloudwatchlogs.Options)) (*cloudwatchlogs.PutLogEventsOutput, error)
	CreateLogGroup(ctx context.Context, in *cloudwatchlogs.CreateLogGroupInput, opts ...func(*cloudwatchlogs.Options)) (*cloudwatchlogs.CreateLogGroupOutput, error)
	CreateLogStream(ctx context.Context, in *cloudwatchlogs.CreateLogStreamInput, opts ...func(*cloudwatchlogs.Options)) (*cloudwatchlogs.CreateLogStreamOutput, error)
}

var _ LogsAPI = (*cloudwatchlogs.Client)(nil)

// LogsOptions configure a LogsSink. Zero fields take their defaults.
// A LogsOptions is a plain value; NewLogsSink copies it.
type LogsOptions struct {
	LogGroup  string // required
	LogStream string // required
	// Create makes the sink create the log group and stream when
	// PutLogEvents says one is missing, then put the batch again.
	Create bool
	// BufferBytes bounds the documents held for delivery, default 8 MiB;
	// a Write that would exceed it is dropped and counted.
	BufferBytes int
	// FlushTimeout bounds a Flush and a Close, default
	// DefaultAWSFlushTimeout: a CloudWatch Logs endpoint that hangs or
	// throttles for good cannot hold up the caller longer. What is not
	// delivered by then is dropped and counted, and the call returns
	// ErrSinkBehind.
	FlushTimeout time.Duration
	Throttle     Throttle
}

func (o *LogsOptions) setDefaults() {
	if o.BufferBytes == 0 {
		o.BufferBytes = 8 << 20
	}
	if o.FlushTimeout == 0 {
		o.FlushTimeout = DefaultAWSFlushTimeout
	}
	o.Throttle.setDefaults()
}

// Validate reports the first option out of range, after defaults.
func (o *LogsOptions) Validate() error {
	switch {
	case o.LogGroup == "":
		return errors.New("logs.log_group: empty, want a log group name")
	case o.LogStream == "":
		return errors.New("logs.log_stream: empty, want a log stream name")
	case o.BufferBytes < logsMaxBatchBytes:
		return fmt.Errorf("logs.buffer_bytes: %d, want at least %d", o.BufferBytes, logsMaxBatchBytes)
	case o.FlushTimeout < 0:
		return fmt.Errorf("logs.flush_timeout: %v, want 0 (the default, %v) or more", o.FlushTimeout, DefaultAWSFlushTimeout)
	}
	return o.Throttle.Validate()
}

// LogsSink is a Sink that puts documents on a CloudWatch Logs stream with
// PutLogEvents and the header x-amzn-logs-format: json/emf, so that
// CloudWatch extracts their metrics. Write buffers and returns; one
// goroutine sends what is buffered in batches within the PutLogEvents
// limits (at most 10,000 events and 1,048,576 bytes counting 26 bytes per
// event, in timestamp order, spanning at most 24 hours), paced and retried
// as its Throttle says. Each event's timestamp is the document's
// _aws.Timestamp, or the time it is sent if the document has none.
//
// Delivery: a document is Written once a PutLogEvents call holding it
// succeeded and CloudWatch did not reject it as too old, too new or
// expired; rejected events and batches that fail for good (a refused call,
// retries exhausted, an open breaker with DropWhenOpen) are Dropped. So is
// everything the sink holds when a Flush or a Close runs out of time
// (FlushTimeout, or its context's end for Close): the buffered documents
// and the batch in flight, whose call is cut; the sink goes on with the
// documents written after, and the call returns ErrSinkBehind. A document
// of a cut call may still have reached CloudWatch, as the request may have
// arrived before the cut: when the request was sent whole, the document is
// counted Unconfirmed besides Dropped, as is one of a call whose attempts
// all failed after one was sent whole and went unanswered (throttler.do).
// A call whose response is lost is retried, so a
// document may be stored twice (at least once within the retry bound). The
// SDK's own retryer is turned off so that Retries and Errors count every
// attempt.
// A LogsSink is safe for concurrent use.
type LogsSink struct {
	api      LogsAPI
	opts     LogsOptions
	thr      *throttler
	counters throttleCounters
	q        *throttleQueue
	created  bool // log group and stream created by this sink
	d        jdoc // the sender's
}

var _ Sink = (*LogsSink)(nil)

// NewLogsSink returns a LogsSink putting events on opts.LogStream through
// api, and starts its sender; Close stops it.
func NewLogsSink(api LogsAPI, opts LogsOptions) (*LogsSink, error) {
	if api == nil {
		return nil, errors.New("new logs sink: nil API")
	}
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("new logs sink: %w", err)
	}
	s := &LogsSink{api: api, opts: opts}
	s.thr = newThrottler(opts.Throttle, &s.counters)
	name := "logs " + opts.LogGroup + "/" + opts.LogStream
	s.q = newThrottleQueue(name, opts.BufferBytes, logsMaxBatchEvents, opts.FlushTimeout, s.thr, &s.counters, s.deliver)
	return s, nil
}

// Write buffers doc for delivery. It drops and counts the document, and
// says why, when the buffer is full, the sink is closed or the breaker is
// open with DropWhenOpen.
func (s *LogsSink) Write(_ context.Context, doc []byte) error {
	if len(doc)+logsEventOverhead > logsMaxBatchBytes {
		return s.q.refuse("document of " + strconv.Itoa(len(doc)) + " bytes exceeds the event limit of " + strconv.Itoa(logsMaxBatchBytes-logsEventOverhead))
	}
	return s.q.write(doc)
}

// Flush waits until every document written before it is delivered or
// dropped, or ctx ends. If that takes longer than FlushTimeout, what the
// sink holds is dropped and counted, and Flush returns ErrSinkBehind,
// saying how many of its documents were not delivered.
func (s *LogsSink) Flush(ctx context.Context) error { return s.q.flush(ctx) }

// Close delivers what is buffered and stops the sender. If ctx ends first,
// or FlushTimeout passes, what is left is dropped and counted; past
// FlushTimeout Close returns ErrSinkBehind.
func (s *LogsSink) Close(ctx context.Context) error { return s.q.close(ctx) }

// makeRoom waits until doc fits in the buffer, or FlushTimeout passes (see
// WriterOptions.WaitForRoom).
func (s *LogsSink) makeRoom(ctx context.Context, doc []byte) error {
	return s.q.awaitRoom(ctx, len(doc))
}

// Stats reports the sink's counters; Retries and Errors count calls.
func (s *LogsSink) Stats() SinkStats { return s.q.stats() }

// logsEvent is one document awaiting delivery.
type logsEvent struct {
	ts  int64 // milliseconds since the epoch
	doc int   // index in the batch handed to deliver
}

// logsTimestamp returns the document's _aws.Timestamp in milliseconds, if
// it is a JSON document with an integer there.
func logsTimestamp(d *jdoc, doc string) (int64, bool) {
	if d.decode(doc) != nil || d.nodes[0].kind != jObject {
		return 0, false
	}
	aws, ok := d.member(0, "_aws")
	if !ok || d.nodes[aws].kind != jObject {
		return 0, false
	}
	ts, ok := d.member(aws, "Timestamp")
	if !ok || d.nodes[ts].kind != jNumber {
		return 0, false
	}
	n, err := d.int(ts)
	return n, err == nil
}

// deliver puts docs in as few calls as the limits allow. It runs on the
// sender goroutine only.
func (s *LogsSink) deliver(ctx context.Context, docs []string) []docFate {
	fates := make([]docFate, len(docs))
	now := s.opts.Throttle.Now().UnixMilli()
	events := make([]logsEvent, len(docs))
	for i, doc := range docs {
		ts, ok := logsTimestamp(&s.d, doc)
		if !ok {
			ts = now
		}
		events[i] = logsEvent{ts: ts, doc: i}
	}
	slices.SortStableFunc(events, func(a, b logsEvent) int { return cmp.Compare(a.ts, b.ts) })
	for len(events) > 0 {
		n, size := 0, 0
		for n < len(events) && n < logsMaxBatchEvents {
			sz := len(docs[events[n].doc]) + logsEventOverhead
			if size+sz > logsMaxBatchBytes || time.Duration(events[n].ts-events[0].ts)*time.Millisecond > logsMaxSpan {
				break
			}
			size += sz
			n++
		}
		s.put(ctx, docs, events[:n], fates)
		events = events[n:]
	}
	return fates
}

// put makes one PutLogEvents call for batch, creating the group and stream
// if they are missing and Create is set, and marks what it gave up on.
func (s *LogsSink) put(ctx context.Context, docs []string, batch []logsEvent, fates []docFate) {
	in := &cloudwatchlogs.PutLogEventsInput{
		LogGroupName:  aws.String(s.opts.LogGroup),
		LogStreamName: aws.String(s.opts.LogStream),
		LogEvents:     make([]types.InputLogEvent, len(batch)),
	}
	for i, e := range batch {
		in.LogEvents[i] = types.InputLogEvent{Message: aws.String(docs[e.doc]), Timestamp: aws.Int64(e.ts)}
	}
	var out *cloudwatchlogs.PutLogEventsOutput
	call := func(ctx context.Context) error {
		var err error
		out, err = s.api.PutLogEvents(ctx, in, logsCallOptions)
		return err
	}
	unanswered, err := s.thr.do(ctx, call)
	var nf *types.ResourceNotFoundException
	if err != nil && s.opts.Create && !s.created && errors.As(err, &nf) {
		if err = s.create(ctx); err == nil {
			s.counters.retries.Add(1)
			var again bool
			again, err = s.thr.do(ctx, call)
			unanswered = unanswered || again
		}
	}
	if err != nil {
		for _, e := range batch {
			markFate(fates, e.doc, callFate(unanswered, err))
		}
		return
	}
	if r := out.RejectedLogEventsInfo; r != nil {
		tooOld, tooNew := int32(-1), int32(len(batch))
		if r.TooOldLogEventEndIndex != nil {
			tooOld = max(tooOld, *r.TooOldLogEventEndIndex)
		}
		if r.ExpiredLogEventEndIndex != nil {
			tooOld = max(tooOld, *r.ExpiredLogEventEndIndex)
		}
		if r.TooNewLogEventStartIndex != nil {
			tooNew = min(tooNew, *r.TooNewLogEventStartIndex)
		}
		for i, e := range batch {
			if int32(i) <= tooOld || int32(i) >= tooNew {
				markFate(fates, e.doc, docDropped)
				s.counters.errors.Add(1) // a refused document, as one that does not fit an event
			}
		}
	}
}

// create makes the log group and stream, taking "already exists" as done.
func (s *LogsSink) create(ctx context.Context) error {
	var exists *types.ResourceAlreadyExistsException
	_, err := s.thr.do(ctx, func(ctx context.Context) error {
		_, err := s.api.CreateLogGroup(ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String(s.opts.LogGroup)}, logsPlainOptions)
		if errors.As(err, &exists) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create log group: %w", err)
	}
	_, err = s.thr.do(ctx, func(ctx context.Context) error {
		_, err := s.api.CreateLogStream(ctx, &cloudwatchlogs.CreateLogStreamInput{
			LogGroupName: aws.String(s.opts.LogGroup), LogStreamName: aws.String(s.opts.LogStream)}, logsPlainOptions)
		if errors.As(err, &exists) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create log stream: %w", err)
	}
	s.created = true
	return nil
}

// logsEMFHeader tells CloudWatch Logs that the events are EMF documents.
var logsEMFHeader = smithyhttp.AddHeaderValue("x-amzn-logs-format", "json/emf")

// logsCallOptions turn off the client's retryer (the sink retries, and
// counts, every attempt itself) and add the EMF header.
func logsCallOptions(o *cloudwatchlogs.Options) {
	o.Retryer = aws.NopRetryer{}
	o.APIOptions = append(o.APIOptions, logsEMFHeader)
}

func logsPlainOptions(o *cloudwatchlogs.Options) { o.Retryer = aws.NopRetryer{} }
