package kinesis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/stream"
)

// lambdaEvent builds a Kinesis event of records: the Sink's Arrow records
// of ds, one JSON record, and garbage where poison says, in that order of
// positions. It goes through JSON as Lambda delivers it (data base64).
func lambdaEvent(t *testing.T, payloads [][]byte) events.KinesisEvent {
	t.Helper()
	var ev events.KinesisEvent
	for i, p := range payloads {
		seq := fmt.Sprintf("4959%020d", i)
		ev.Records = append(ev.Records, events.KinesisEventRecord{
			EventID:     "shardId-000000000001:" + seq,
			EventSource: "aws:kinesis",
			Kinesis:     events.KinesisRecord{Data: p, PartitionKey: "0", SequenceNumber: seq},
		})
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var out events.KinesisEvent
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// batchEvents reads a batch's rows with b.Rows, so that its corrupt
// records are reported, and returns its events, its records decoded.
func batchEvents(t *testing.T, b *stream.Batch) []decisions.Decision {
	t.Helper()
	if _, err := b.Rows(columnar.NewDecoder(), func(*stream.Rows) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var ds []decisions.Decision
	for i := range b.Records {
		ds, _ = Decode(b.Records[i].Data, ds)
	}
	return ds
}

// TestLambdaHandler hands a batch with a poison record (undecodable) in the
// middle to the handler: the poison record is skipped and counted, the
// records around it are handled, and no failure is reported, so the shard
// moves on. With a record per batch, a handler that fails on one record
// gets that record's sequence number reported, and nothing after it is
// handled.
func TestLambdaHandler(t *testing.T) {
	g := decisiontest.NewGenerator(41, start)
	var payloads [][]byte
	want := 0
	for b := range 3 {
		ds := g.Batch(50)
		for i := range ds {
			ds[i].RequestID = fmt.Sprintf("b%d-%d", b, i)
		}
		api, _ := sendFake(t, Options{Partitions: 1, JSON: b == 2}, ds)
		for _, r := range api.delivered {
			payloads = append(payloads, r.Data)
		}
		want += len(ds)
	}
	poisonAt := 1
	payloads = append(payloads[:poisonAt], append([][]byte{[]byte("\x01not arrow at all")}, payloads[poisonAt:]...)...)
	ev := lambdaEvent(t, payloads)

	got := map[string]int{}
	l := NewLambdaHandler(stream.HandleFunc(func(_ context.Context, b *stream.Batch) error {
		if b.Partition != "shardId-000000000001" || b.From.Seq != ev.Records[0].Kinesis.SequenceNumber || len(b.Records) != len(ev.Records) {
			return fmt.Errorf("batch %s/%s of %d records", b.Partition, b.From, len(b.Records))
		}
		for _, d := range batchEvents(t, b) {
			got[d.RequestID]++
		}
		return nil
	}), LambdaOptions{})
	resp, err := l.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("response %+v, %v: want no failure", resp, err)
	}
	if len(got) != want {
		t.Fatalf("handled %d distinct events, want %d", len(got), want)
	}
	st := l.Stats()
	if st.Corrupt != 1 || st.Events != uint64(want) || st.Records != uint64(len(payloads)) || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
	if p := l.Problems(); len(p) != 1 || !strings.Contains(p[0].Error(), ev.Records[poisonAt].Kinesis.SequenceNumber) {
		t.Fatalf("problems %v", p)
	}

	// The handler fails on the record holding b1-0.
	handled := 0
	failing := NewLambdaHandler(stream.HandleFunc(func(_ context.Context, b *stream.Batch) error {
		ds := batchEvents(t, b)
		for _, d := range ds {
			if d.RequestID == "b1-0" {
				return errors.New("downstream unavailable")
			}
		}
		handled += len(ds)
		return nil
	}), LambdaOptions{CommitRecords: 1})
	resp, err = failing.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	failedAt := -1
	for i, r := range ev.Records {
		ds, err := Decode(r.Kinesis.Data, nil)
		if err == nil && len(ds) > 0 && ds[0].RequestID == "b1-0" {
			failedAt = i
		}
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[failedAt].Kinesis.SequenceNumber {
		t.Fatalf("failures %+v, want the sequence number of record %d", resp.BatchItemFailures, failedAt)
	}
	if handled != 50 || failing.Stats().Failed != 1 {
		t.Fatalf("handled %d events before the failure, want the 50 of the first record; stats %+v", handled, failing.Stats())
	}

	// Batch.Rows reads the same records: Arrow ones as columns, the JSON
	// one as events; the poison is counted, and with commit groups of two
	// records a failure names the first record of the group it happened in.
	var columns, jsonRows int
	dec := columnar.NewDecoder()
	rows := NewLambdaHandler(stream.HandleFunc(func(_ context.Context, b *stream.Batch) error {
		_, err := b.Rows(dec, func(r *stream.Rows) error {
			if b.Partition != "shardId-000000000001" || r.Pos.Seq == "" || (r.Columns == nil) == (r.Events == nil) {
				return fmt.Errorf("rows of %s at %+v", b.Partition, r.Pos)
			}
			if r.Columns != nil {
				columns += r.Len()
			} else {
				jsonRows += r.Len()
			}
			if r.Pos.Seq == ev.Records[failedAt].Kinesis.SequenceNumber && columns+jsonRows > 100 {
				return errors.New("downstream unavailable")
			}
			return nil
		})
		return err
	}), LambdaOptions{CommitRecords: 2})
	if resp, err := rows.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("rows: response %+v, %v: want no failure", resp, err)
	}
	if st := rows.Stats(); columns != 100 || jsonRows != 50 || st.Corrupt != 1 || st.Events != uint64(want) {
		t.Fatalf("rows: %d as columns, %d as events, stats %+v", columns, jsonRows, st)
	}
	group := groupOf(ev, failedAt, 2)
	if resp, _ := rows.Handle(context.Background(), ev); len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[group].Kinesis.SequenceNumber {
		t.Fatalf("rows: failures %+v, want the sequence number of record %d", resp.BatchItemFailures, group)
	}
}

// TestLambdaHandlerLogsRecords: a CloudWatch Logs subscription record's
// decisions are handled like any record's; its log events that are not
// decisions are counted corrupt one by one, without losing the others; a
// control message hands over nothing and counts nothing.
func TestLambdaHandlerLogsRecords(t *testing.T) {
	g := decisiontest.NewGenerator(43, start)
	ds := g.Batch(3)
	var lines []string
	for i := range ds {
		lines = append(lines, decisiontest.LambdaLine(string(decisions.AppendJSON(nil, &ds[i]))))
	}
	ev := lambdaEvent(t, [][]byte{
		decisiontest.LogsRecord("CONTROL_MESSAGE", 1772366430250, "CWL CONTROL MESSAGE: Checking health of destination Kinesis stream."),
		decisiontest.LogsRecord("DATA_MESSAGE", 1772366430250, "START RequestId: 1 Version: 1\n", lines[0], lines[1], "END RequestId: 1\n"),
		decisiontest.LogsRecord("DATA_MESSAGE", 1772366430250, lines[2]),
	})
	var got []decisions.Decision
	l := NewLambdaHandler(stream.HandleFunc(func(_ context.Context, b *stream.Batch) error {
		got = append(got, batchEvents(t, b)...)
		return nil
	}), LambdaOptions{CommitRecords: 1})
	resp, err := l.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle: %v, failures %v", err, resp.BatchItemFailures)
	}
	if len(got) != len(ds) {
		t.Fatalf("%d events handed over, want %d", len(got), len(ds))
	}
	for i := range got {
		if d := decisiontest.Diff(got[i], ds[i]); d != "" {
			t.Errorf("event %d:\n%s", i, d)
		}
	}
	if s := l.Stats(); s.Records != 3 || s.Events != 3 || s.Corrupt != 2 {
		t.Errorf("stats %+v: want 3 records, 3 events, 2 corrupt log events", s)
	}
}

// skipTo is a handler whose own position is inside the invocation: at
// the event it names.
type skipTo struct {
	stream.HandleFunc
	at stream.Position
}

func (s skipTo) Open(context.Context, string, stream.Position) (stream.Position, error) {
	return s.at, nil
}

// TestLambdaHandlerOpenPosition: an invocation is handed from the
// position the handler's Open returns when it names one of its records:
// the records before it are left out, and the events of that record
// before the position; a position outside the invocation is ignored.
func TestLambdaHandlerOpenPosition(t *testing.T) {
	ev := lambdaEvent(t, sinkRecords(t, 45, 3, 50))
	f := func(at stream.Position, wantFrom stream.Position, want int) {
		t.Helper()
		var from []stream.Position
		got := uint64(0)
		l := NewLambdaHandler(skipTo{at: at, HandleFunc: func(_ context.Context, b *stream.Batch) error {
			from = append(from, b.From)
			n, err := b.Rows(columnar.NewDecoder(), func(*stream.Rows) error { return nil })
			got += n
			return err
		}}, LambdaOptions{})
		if resp, err := l.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%v %+v", err, resp)
		}
		if got != uint64(want) || l.Stats().Events != got || len(from) != 1 || from[0] != wantFrom {
			t.Fatalf("Open at %v: batches from %v, %d events handed (stats %+v), want one from %v, %d", at, from, got, l.Stats(), wantFrom, want)
		}
	}
	first := stream.Position{Seq: ev.Records[0].Kinesis.SequenceNumber}
	inside := stream.Position{Seq: ev.Records[1].Kinesis.SequenceNumber, Sub: 10}
	f(inside, inside, 90)
	f(first, first, 150)
	f(stream.Position{Seq: "elsewhere", Sub: 3}, first, 150)
}

// TestLambdaHandlerRetryFrom: a handler's RetryFrom naming one of its
// batch's records makes the invocation name that record; one naming a
// record outside the batch (a handler's mistake, or a position of another
// batch) falls back to the batch's first record, so that nothing the
// batch holds is skipped.
func TestLambdaHandlerRetryFrom(t *testing.T) {
	payloads := make([][]byte, 40)
	for i := range payloads {
		payloads[i] = []byte{9, 9, 9}
	}
	ev := lambdaEvent(t, payloads)
	seq := func(i int) string { return ev.Records[i].Kinesis.SequenceNumber }
	// A group of three records or more, not the first.
	first := -1
	for i := 1; i+2 < len(ev.Records) && first < 0; i++ {
		if groupOf(ev, i, 4) == i && groupOf(ev, i+2, 4) == i {
			first = i
		}
	}
	if first < 0 {
		t.Fatal("no group of three records in the event")
	}
	for _, c := range []struct {
		name     string
		from     string
		failedAt int
	}{
		{"a record of the batch", seq(first + 1), first + 1},
		{"the batch's first", seq(first), first},
		{"a record of an earlier batch", seq(first - 1), first},
		{"no record", "4959", first},
	} {
		l := NewLambdaHandler(stream.HandleFunc(func(_ context.Context, b *stream.Batch) error {
			if b.Records[0].Pos.Seq == seq(first) {
				return fmt.Errorf("write: %w", &RetryFrom{Seq: c.from, Err: errors.New("sink down")})
			}
			return nil
		}), LambdaOptions{CommitRecords: 4})
		resp, err := l.Handle(context.Background(), ev)
		if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != seq(c.failedAt) {
			t.Errorf("%s: %v %+v, want a failure at record %d", c.name, err, resp, c.failedAt)
		}
	}
}

// groupOf returns the first record of the commit group of about n records
// that holds record i of ev, an invocation's records.
func groupOf(ev events.KinesisEvent, i, n int) int {
	for i > 0 && !StartsCommitGroup(ev.Records[i].Kinesis.SequenceNumber, n) {
		i--
	}
	return i
}

// TestCommitGroups: commit groups fall at the same records whatever
// record an invocation begins with, as a function error's retry in
// halves needs; they hold about CommitRecords records (every record for
// 1, the whole invocation for 0), on sequence numbers as Kinesis writes
// them (56 digits, growing by irregular steps).
func TestCommitGroups(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	seqs := make([]string, 20_000)
	n := new(big.Int)
	n.SetString("49590338271490256608559692538361571095921575989136588898", 10)
	for i := range seqs {
		n.Add(n, big.NewInt(int64(1+r.IntN(1<<40))))
		seqs[i] = n.String()
	}
	for _, size := range []int{2, 10, 100} {
		starts := 0
		for _, s := range seqs {
			if StartsCommitGroup(s, size) {
				starts++
			}
		}
		if mean := float64(len(seqs)) / float64(starts); mean < 0.85*float64(size) || mean > 1.15*float64(size) {
			t.Errorf("CommitRecords %d: groups of %.1f records on average", size, mean)
		}
	}
	if !StartsCommitGroup(seqs[0], 1) || StartsCommitGroup(seqs[0], 0) {
		t.Error("CommitRecords 1 must start a group at every record, 0 at none")
	}

	// The groups an invocation hands over, from record 0 and from record
	// 37: the same from 37 on.
	var payloads [][]byte
	for range 200 {
		payloads = append(payloads, []byte{9, 9, 9})
	}
	ev := lambdaEvent(t, payloads)
	groups := func(from int) []string {
		var firsts []string
		l := NewLambdaHandler(stream.HandleFunc(func(_ context.Context, b *stream.Batch) error {
			firsts = append(firsts, b.Records[0].Pos.Seq)
			return nil
		}), LambdaOptions{CommitRecords: 5})
		if _, err := l.Handle(context.Background(), events.KinesisEvent{Records: ev.Records[from:]}); err != nil {
			t.Fatal(err)
		}
		return firsts
	}
	all, late := groups(0), groups(37)
	at := slices.Index(all, late[1])
	if len(all) < 20 || at < 0 || !slices.Equal(all[at:], late[1:]) || late[0] != ev.Records[37].Kinesis.SequenceNumber {
		t.Errorf("groups from record 0 %v\nfrom record 37 %v", all, late)
	}
}

// TestLambdaHandlerForgedPositions: records whose sequence number Kinesis
// could not have given (not digits, a path, empty, a leading 0, 130
// digits) or that an earlier record of the batch has are skipped,
// counted and named, and never handed on: the sequence number names the
// outputs' files (a "../" in it wrote one outside the partials
// directory, and a record twice overwrote the other's). An event id that
// names no shard skips the whole batch alike. Neither is retried.
func TestLambdaHandlerForgedPositions(t *testing.T) {
	payloads := sinkRecords(t, 43, 8, 20)
	ev := lambdaEvent(t, payloads[:8])
	forged := map[int]string{1: "../../../outside", 2: "", 3: "0123", 4: strings.Repeat("9", 130), 5: ev.Records[0].Kinesis.SequenceNumber, 6: "12.5"}
	for i, seq := range forged {
		ev.Records[i].Kinesis.SequenceNumber = seq
	}
	var handed []string
	l := NewLambdaHandler(stream.HandleFunc(func(_ context.Context, b *stream.Batch) error {
		for _, r := range b.Records {
			handed = append(handed, r.Pos.Seq)
		}
		return nil
	}), LambdaOptions{CommitRecords: 1})
	resp, err := l.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("response %+v, %v: want no failure", resp, err)
	}
	want := []string{ev.Records[0].Kinesis.SequenceNumber, ev.Records[7].Kinesis.SequenceNumber}
	if !slices.Equal(handed, want) {
		t.Errorf("handed %q, want %q", handed, want)
	}
	if st := l.Stats(); st.Corrupt != uint64(len(forged)) {
		t.Errorf("%d skipped, want %d", st.Corrupt, len(forged))
	}
	if p := l.Problems(); len(p) != len(forged) || !strings.Contains(fmt.Sprint(p), "an earlier record of the batch") || !strings.Contains(fmt.Sprint(p), `"../../../outside"`) {
		t.Errorf("problems %v", p)
	}

	ev = lambdaEvent(t, payloads[:3])
	for i := range ev.Records {
		ev.Records[i].EventID = "../x:" + ev.Records[i].Kinesis.SequenceNumber
	}
	handed = nil
	l = NewLambdaHandler(stream.HandleFunc(func(_ context.Context, b *stream.Batch) error {
		handed = append(handed, b.Partition)
		return nil
	}), LambdaOptions{})
	if resp, err := l.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 || len(handed) != 0 || l.Stats().Corrupt != 3 {
		t.Errorf("an event id of no shard: response %+v, %v; handed %q; stats %+v", resp, err, handed, l.Stats())
	}
}

// sinkRecords returns the records the Sink writes for n batches of size
// of the generator seeded seed's decisions, one partition.
func sinkRecords(t *testing.T, seed uint64, n, size int) [][]byte {
	t.Helper()
	g := decisiontest.NewGenerator(seed, start)
	var payloads [][]byte
	for range n {
		api, _ := sendFake(t, Options{Partitions: 1}, g.Batch(size))
		for _, r := range api.delivered {
			payloads = append(payloads, r.Data)
		}
	}
	return payloads
}
