package aggregator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// kinesisEvent is one invocation's worth of records as the edge's Kinesis
// sink writes them: Arrow batches of 500, one JSON decision, and a record
// that decodes to nothing.
func kinesisEvent(t *testing.T, ds []decisions.Decision) events.KinesisEvent {
	t.Helper()
	var payloads [][]byte
	for i := 0; i < len(ds)-1; i += 500 {
		b, err := columnar.Encode([]byte{byte(columnar.CodecArrow)}, ds[i:min(i+500, len(ds)-1)], columnar.Options{})
		if err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, b)
	}
	payloads = append(payloads, decisions.AppendJSON([]byte{byte(columnar.CodecJSON)}, &ds[len(ds)-1]), []byte{9, 9, 9})
	var ev events.KinesisEvent
	for i, p := range payloads {
		seq := fmt.Sprintf("4959%020d", 100+i)
		ev.Records = append(ev.Records, events.KinesisEventRecord{EventID: "shardId-000000000002:" + seq,
			EventSource: "aws:kinesis", Kinesis: events.KinesisRecord{Data: p, SequenceNumber: seq}})
	}
	return ev
}

// TestKinesisLambda: an invocation's decisions land in the partials of
// their windows, all of them once; a retried invocation rewrites the same
// files with the same bytes; a failing sink fails the invocation at its
// first record.
func TestKinesisLambda(t *testing.T) {
	ds := decisiontest.NewGenerator(12, t0).Batch(3001)
	ev := kinesisEvent(t, ds)
	dir := t.TempDir()
	l := &KinesisLambda{Sinks: []Sink{&PartialsDir{Dir: dir}}, Window: time.Second}
	resp, err := l.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%v %+v", err, resp)
	}
	first := files(t, dir)
	if e, _ := totals(t, dir, time.Second); e != uint64(len(ds)) {
		t.Fatalf("partials hold %d events, the invocation %d", e, len(ds))
	}
	if ps := l.Problems(); len(ps) != 1 || !strings.Contains(ps[0].Error(), ev.Records[len(ev.Records)-1].Kinesis.SequenceNumber) {
		t.Errorf("problems %v, want the corrupt record named", ps)
	}
	if st := l.Stats(); st.Corrupt != 1 || st.Events != uint64(len(ds)) || int(st.Outputs) != len(first) {
		t.Fatalf("stats %+v, %d files", st, len(first))
	}
	if _, err := l.Handle(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	again := files(t, dir)
	if fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatal("a retried invocation changed the partials")
	}
	bad := &KinesisLambda{Sinks: []Sink{failing{}}, Window: time.Second}
	resp, _ = bad.Handle(context.Background(), ev)
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[0].Kinesis.SequenceNumber {
		t.Fatalf("a failing sink answered %+v", resp)
	}
}

type failing struct{}

func (failing) Write(context.Context, string, Output) error { return errors.New("sink down") }
func (failing) Flush(context.Context) error                 { return nil }

// TestKinesisLambdaColumnsEqualsEvents: the Lambda aggregator rolling
// Arrow records up from their columns writes the same partials, byte for
// byte, as rolling their events up one by one, with records that cut
// windows, events out of order across windows and lists small enough to
// evict.
func TestKinesisLambdaColumnsEqualsEvents(t *testing.T) {
	ds := testEvents(12_001)
	ev := kinesisEvent(t, ds)
	var got, want map[string][]byte
	for _, perEvent := range []bool{true, false} {
		dir := t.TempDir()
		l := &KinesisLambda{Sinks: []Sink{&PartialsDir{Dir: dir}}, Window: time.Second, TopK: 4, perEvent: perEvent}
		if resp, err := l.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%v %+v", err, resp)
		}
		if st := l.Stats(); st.Events != uint64(len(ds)) || st.Corrupt != 1 || st.Outputs < 3 {
			t.Fatalf("per event %v: stats %+v", perEvent, st)
		}
		if perEvent {
			want = files(t, dir)
		} else {
			got = files(t, dir)
		}
	}
	sameFiles(t, "columns", got, want)
}
