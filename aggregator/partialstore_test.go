package aggregator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/store"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/internal/atomicfile"
	"github.com/ratewarden/ratewarden/internal/awserr"
	"github.com/ratewarden/ratewarden/internal/ddbtable"
)

// partialStore is what both partial stores offer: a Sink, and the walk
// and merged read every reader uses.
type partialStore interface {
	Sink
	PartialsWalker
	Read(ctx context.Context, size time.Duration, from, to time.Time) (map[time.Time]*Partial, []ReadProblem, error)
}

// storeCase is one store under the conformance suite: a new, empty store
// per call, and how to spoil one stored partial of it.
type storeCase struct {
	name    string
	new     func(t *testing.T) partialStore
	corrupt func(t *testing.T, s partialStore, partition string, o Output, data []byte) // o's partial as data
}

// testPartials fills one partial per window of size from the generator's
// events, for windows starting at start, start+size, ...; events of the
// same window go to partition by their client, so that the partitions'
// partials count disjoint clients.
func testPartials(start time.Time, size time.Duration, windows int, partitions int) map[string][]*Partial {
	g := decisiontest.NewGenerator(3, start)
	out := map[string][]*Partial{}
	for w := range windows {
		ws := start.Add(time.Duration(w) * size)
		ps := make([]*Partial, partitions)
		for i := range ps {
			ps[i] = NewPartial(ws, size, 20)
		}
		for _, d := range g.Batch(400) {
			d.Time = ws.Add(time.Duration(d.Time.UnixNano() % int64(size)))
			c := ClientOf(&d, 0).String()
			ps[int(c[len(c)-1])%partitions].Update(&d)
		}
		for i, p := range ps {
			name := fmt.Sprint("shard-", i)
			out[name] = append(out[name], p)
		}
	}
	return out
}

func encodeP(t *testing.T, p *Partial) []byte {
	t.Helper()
	b, err := p.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// encodeAll encodes read's result by window start, in order.
func encodeAll(t *testing.T, m map[time.Time]*Partial) []string {
	t.Helper()
	starts := make([]time.Time, 0, len(m))
	for s := range m {
		starts = append(starts, s)
	}
	slices.SortFunc(starts, time.Time.Compare)
	var out []string
	for _, s := range starts {
		out = append(out, s.Format(time.RFC3339Nano)+" "+string(encodeP(t, m[s])))
	}
	return out
}

// bigPartial is a partial whose encoding is larger than a DynamoDB item
// may be: a top-K list of many distinct users with long names.
func bigPartial(t *testing.T, start time.Time, size time.Duration) *Partial {
	t.Helper()
	p := NewPartial(start, size, 20_000)
	d := decisiontest.NewGenerator(5, start).Next()
	d.Kind = decisions.KindDecision
	d.Time = start
	for i := range 20_000 {
		d.UserID = fmt.Sprintf("%040d", i)
		p.Update(&d)
	}
	if n := len(encodeP(t, p)); n <= 400<<10 {
		t.Fatalf("big partial encodes to %d bytes, want more than 400 KB", n)
	}
	return p
}

func runPartialStoreSuite(t *testing.T, c storeCase) {
	ctx := t.Context()
	size := time.Minute
	// The windows cross a UTC midnight, so that reads span two days.
	start := time.Date(2026, 11, 30, 23, 55, 0, 0, time.UTC)
	const windows = 10
	parts := testPartials(start, size, windows, 3)
	writeAll := func(t *testing.T, s partialStore) {
		for partition, ps := range parts {
			for i, p := range ps {
				if err := s.Write(ctx, partition, Output{Partial: p, From: uint64(i * 100), To: uint64(i*100 + 99)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	read := func(t *testing.T, s partialStore, from, to time.Time) map[time.Time]*Partial {
		t.Helper()
		got, problems, err := s.Read(ctx, size, from, to)
		if err != nil || len(problems) > 0 {
			t.Fatalf("read: %v, problems %v", err, problems)
		}
		return got
	}
	// whole is each window's partials merged by hand, as one aggregator
	// reading every partition would have counted them.
	whole := func(t *testing.T, from, to int) []string {
		m := map[time.Time]*Partial{}
		for _, name := range []string{"shard-0", "shard-1", "shard-2"} {
			for _, p := range parts[name][from:to] {
				q, err := DecodePartial(encodeP(t, p))
				if err != nil {
					t.Fatal(err)
				}
				if acc := m[q.Start]; acc == nil {
					m[q.Start] = q
				} else if err := acc.Merge(q, true); err != nil {
					t.Fatal(err)
				}
			}
		}
		return encodeAll(t, m)
	}

	t.Run("merge equals whole", func(t *testing.T) {
		s := c.new(t)
		writeAll(t, s)
		got := encodeAll(t, read(t, s, start, start.Add(windows*size)))
		if want := whole(t, 0, windows); !slices.Equal(got, want) {
			t.Fatalf("read %d windows, want %d; or their partials differ", len(got), len(want))
		}
	})
	t.Run("read a range", func(t *testing.T) {
		s := c.new(t)
		writeAll(t, s)
		// [window 3, window 7): across midnight, the end excluded.
		got := encodeAll(t, read(t, s, start.Add(3*size), start.Add(7*size)))
		if want := whole(t, 3, 7); !slices.Equal(got, want) {
			t.Fatalf("read %d windows, want %d (windows 3 to 6); or their partials differ", len(got), len(want))
		}
		if got := read(t, s, start.Add(time.Hour), start.Add(2*time.Hour)); len(got) != 0 {
			t.Fatalf("read %d windows of an empty range", len(got))
		}
		if got := read(t, s, start, start.Add(time.Nanosecond)); len(got) != 1 {
			t.Fatalf("read %d windows of a nanosecond's range at a window's start, want 1", len(got))
		}
	})
	t.Run("rerun overwrites", func(t *testing.T) {
		s := c.new(t)
		writeAll(t, s)
		writeAll(t, s)
		got := encodeAll(t, read(t, s, start, start.Add(windows*size)))
		if want := whole(t, 0, windows); !slices.Equal(got, want) {
			t.Fatal("a rerun changed what is read")
		}
		// A delivery of the same output with other contents replaces it.
		empty := NewPartial(start, size, 20)
		for _, name := range []string{"shard-0", "shard-1", "shard-2"} {
			if err := s.Write(ctx, name, Output{Partial: empty, From: 0, To: 99}); err != nil {
				t.Fatal(err)
			}
		}
		if got := read(t, s, start, start.Add(size)); got[start] == nil || got[start].Events != 0 {
			t.Fatalf("after replacing window 0 with empty partials: %+v", got)
		}
	})
	t.Run("corrections", func(t *testing.T) {
		s := c.new(t)
		writeAll(t, s)
		late := testPartials(start, size, 1, 1)["shard-0"][0]
		if err := s.Write(ctx, "shard-1", Output{Partial: late, Correction: true, From: 5000, To: 5010}); err != nil {
			t.Fatal(err)
		}
		got := read(t, s, start, start.Add(size))
		want := parts["shard-0"][0].Events + parts["shard-1"][0].Events + parts["shard-2"][0].Events + late.Events
		if got[start] == nil || got[start].Events != want {
			t.Fatalf("window 0 with a correction: %+v, want %d events", got[start], want)
		}
		var files []PartialFile
		if _, err := s.Walk(ctx, size, start, start.Add(size), func(f PartialFile, _ *Partial) { files = append(files, f) }); err != nil {
			t.Fatal(err)
		}
		if len(files) != 4 || !slices.ContainsFunc(files, func(f PartialFile) bool { return f.Partition == "shard-1" && f.Range == "5000-5010" }) {
			t.Fatalf("walked %+v, want the window's three partials and shard-1's correction 5000-5010", files)
		}
	})
	t.Run("chunked", func(t *testing.T) {
		s := c.new(t)
		big := bigPartial(t, start, size)
		for range 2 { // and a rerun
			if err := s.Write(ctx, "shard-0", Output{Partial: big, From: 1, To: 2}); err != nil {
				t.Fatal(err)
			}
		}
		got := read(t, s, start, start.Add(size))
		if got[start] == nil || !bytes.Equal(encodeP(t, got[start]), encodeP(t, big)) {
			t.Fatal("the chunked partial read back differs")
		}
	})
	t.Run("corrupt skipped and counted", func(t *testing.T) {
		bad := Output{Partial: parts["shard-2"][4], From: 400, To: 499}
		for _, bc := range []struct {
			name string
			data []byte
			why  string // in the problem's error
		}{
			{"garbage", []byte("not a partial"), "not a partial"},
			{"latency bin far out", farLatencyBin(t, bad.Partial), "decode store latency"},
			// A flip that version 4, without a checksum, read as a window
			// of one event more or fewer.
			{"events bit flipped", eventsFlipped(t, encodeP(t, bad.Partial)), "checksum mismatch"},
		} {
			s := c.new(t)
			writeAll(t, s)
			c.corrupt(t, s, "shard-2", bad, bc.data)
			got, problems, err := s.Read(ctx, size, start, start.Add(windows*size))
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != 1 || !strings.Contains(problems[0].Path, "shard-2") || !strings.Contains(problems[0].Err.Error(), bc.why) {
				t.Fatalf("%s: problems %v, want the corrupt partial of shard-2, %q", bc.name, problems, bc.why)
			}
			w4 := start.Add(4 * size)
			if want := parts["shard-0"][4].Events + parts["shard-1"][4].Events; got[w4] == nil || got[w4].Events != want || len(got) != windows {
				t.Fatalf("%s: window 4 without its corrupt partial: %+v, want %d events, and %d windows", bc.name, got[w4], want, windows)
			}
		}
	})
	t.Run("bad partition", func(t *testing.T) {
		s := c.new(t)
		for _, name := range []string{"", "a/b", "a.b", `a\b`} {
			if err := s.Write(ctx, name, Output{Partial: parts["shard-0"][0]}); err == nil {
				t.Errorf("partition %q taken", name)
			}
		}
	})
}

func TestPartialStores(t *testing.T) {
	cases := []storeCase{{
		name: "dir",
		new:  func(t *testing.T) partialStore { return &PartialsDir{Dir: t.TempDir()} },
		corrupt: func(t *testing.T, s partialStore, partition string, o Output, data []byte) {
			d := s.(*PartialsDir)
			if err := atomicfile.Write(d.path(partition, o), data, 0o644); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name: "table",
		new: func(t *testing.T) partialStore {
			st := newStandIns(t)
			name := fmt.Sprintf("agg-partials-%d-%d", time.Now().UnixNano(), names.Add(1))
			awstest.CreateTable(t, st.dc, PartialsTableSpec(name))
			return &PartialsTable{API: st.dc, Table: name}
		},
		corrupt: func(t *testing.T, s partialStore, partition string, o Output, data []byte) {
			pt := s.(*PartialsTable)
			p := o.Partial
			key := partialsKey(p.Size.String()+"/"+p.Start.UTC().Format(time.DateOnly), partialsStartKey(p.Start)+"."+partition+"."+o.RangeKey())
			_, err := (&ddbtable.Calls{API: pt.API, Table: pt.Table}).Put(t.Context(), &dynamodb.PutItemInput{Item: withData(key, data, p, partition, o.RangeKey())})
			if err != nil {
				t.Fatal(err)
			}
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runPartialStoreSuite(t, c) })
	}
}

// farLatencyBin returns p's encoding with a store latency in one bin far
// beyond any a latency falls in (2^32), as corrupt or hostile bytes could
// hold it: the sketch library's dense store would index out of its range
// decoding it, were the bins not checked first (decodeLatencySketch).
func farLatencyBin(t *testing.T, p *Partial) []byte {
	t.Helper()
	q := *p
	q.Latency.Sketch = ddsketch.NewDDSketch(latencyMapping, store.NewSparseStore(), store.NewSparseStore())
	q.Latency.Sketch.GetPositiveValueStore().AddWithCount(1<<32, 1)
	b, err := q.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withData returns a head item of key holding data, as Write would name it.
func withData(key map[string]ddb.AttributeValue, data []byte, p *Partial, partition, rng string) map[string]ddb.AttributeValue {
	key[partialsAttrStart] = &ddb.AttributeValueMemberN{Value: fmt.Sprint(p.Start.UnixNano())}
	key[partialsAttrPartition] = &ddb.AttributeValueMemberS{Value: partition}
	key[partialsAttrRange] = &ddb.AttributeValueMemberS{Value: rng}
	key[partialsAttrGen] = &ddb.AttributeValueMemberS{Value: "0"}
	key[partialsAttrChunks] = &ddb.AttributeValueMemberN{Value: "0"}
	key[partialsAttrData] = &ddb.AttributeValueMemberB{Value: data}
	return key
}

// TestTableCallsThrottled: a throttled call is tried again after backoff
// until it succeeds, or, throttled more than Retries times, fails with
// the throttling error; the SDK's own retries are off, so that the proxy
// counts every attempt.
func TestTableCallsThrottled(t *testing.T) {
	st := newStandIns(t)
	name := fmt.Sprintf("agg-throttled-%d-%d", time.Now().UnixNano(), names.Add(1))
	awstest.CreateTable(t, st.dc, PartialsTableSpec(name))
	f := func(throttles int64, retries int, wantPuts int64, wantErr bool) {
		t.Helper()
		th := awstest.ThrottleDynamoDB(t, throttles, "PutItem")
		dc := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) {
			o.BaseEndpoint, o.RetryMaxAttempts = &th.URL, 1
		})
		c := &ddbtable.Calls{API: dc, Table: name, Retries: retries, Jitter: func(int64) int64 { return 0 }}
		_, err := c.Put(t.Context(), &dynamodb.PutItemInput{Item: partialsKey("w", fmt.Sprint(throttles, retries))})
		if puts := th.Calls("PutItem"); (err != nil) != wantErr || wantErr && !awserr.IsThrottle(err) || puts != wantPuts {
			t.Errorf("throttled %d times, %d retries: err %v after %d puts; want error %v after %d", throttles, retries, err, puts, wantErr, wantPuts)
		}
	}
	f(0, 2, 1, false)
	f(2, 2, 3, false)
	f(3, 2, 3, true)

	// PartialsTable.Write rides out throttling (the default backoff).
	th := awstest.ThrottleDynamoDB(t, 2, "PutItem")
	dc := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) { o.BaseEndpoint, o.RetryMaxAttempts = &th.URL, 1 })
	s := &PartialsTable{API: dc, Table: name}
	p := testPartials(t0, time.Minute, 1, 1)["shard-0"][0]
	if err := s.Write(t.Context(), "shard-0", Output{Partial: p, From: 1, To: 2}); err != nil {
		t.Fatal(err)
	}
	got, problems, err := s.Read(t.Context(), time.Minute, t0, t0.Add(time.Minute))
	if err != nil || len(problems) > 0 || got[t0] == nil || got[t0].Events != p.Events || th.Calls("PutItem") != 5 {
		t.Fatalf("after 2 throttled puts: %v %v %+v, %d puts (want 5: the lengths index throttled twice, then it, the day index and the head)", err, problems, got, th.Calls("PutItem"))
	}
}

// TestPartialsTableChunks: a delivery of an output whose bytes differ
// replaces the earlier one's chunks (none left behind), and a head whose
// chunk is missing is skipped and reported, not assembled from what is
// there.
func TestPartialsTableChunks(t *testing.T) {
	st := newStandIns(t)
	name := fmt.Sprintf("agg-chunks-%d-%d", time.Now().UnixNano(), names.Add(1))
	awstest.CreateTable(t, st.dc, PartialsTableSpec(name))
	s := &PartialsTable{API: st.dc, Table: name}
	ctx, size := t.Context(), time.Minute
	items := func() []string {
		t.Helper()
		var keys []string
		err := s.calls().Query(ctx, partialsAt("1m0s/"+t0.Format(time.DateOnly)), func(page []map[string]ddb.AttributeValue) error {
			for _, it := range page {
				keys = append(keys, ddbtable.Str(it, partialsAttrOutput))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	first, second := bigPartial(t, t0, size), bigPartial(t, t0, size)
	d := decisiontest.NewGenerator(6, t0).Next()
	d.Kind, d.Time, d.UserID = decisions.KindDecision, t0, "one more"
	second.Update(&d)
	if bytes.Equal(encodeP(t, first), encodeP(t, second)) {
		t.Fatal("the two deliveries encode alike")
	}
	for _, p := range []*Partial{first, second} {
		if err := s.Write(ctx, "shard-0", Output{Partial: p, From: 1, To: 2}); err != nil {
			t.Fatal(err)
		}
	}
	keys := items()
	chunks := int((len(encodeP(t, second)) + ddbtable.ChunkBytes - 1) / ddbtable.ChunkBytes)
	if len(keys) != 1+chunks {
		t.Fatalf("items after a delivery with other bytes: %q, want the head and its %d chunks", keys, chunks)
	}
	got, problems, err := s.Read(ctx, size, t0, t0.Add(size))
	if err != nil || len(problems) > 0 || got[t0] == nil || !bytes.Equal(encodeP(t, got[t0]), encodeP(t, second)) {
		t.Fatalf("read %v %v: not the second delivery", err, problems)
	}
	if err := s.calls().Delete(ctx, partialsKey("1m0s/"+t0.Format(time.DateOnly), keys[len(keys)-1])); err != nil {
		t.Fatal(err)
	}
	got, problems, err = s.Read(ctx, size, t0, t0.Add(size))
	if err != nil || len(got) != 0 || len(problems) != 1 || !strings.Contains(problems[0].Err.Error(), "is missing") {
		t.Fatalf("with a chunk missing: %v, %d windows, problems %v; want the partial skipped and reported", err, len(got), problems)
	}
}

// TestHasWindow: a directory and a table say alike whether they hold
// partials of a window length, and name the lengths they hold when not;
// one that holds none is ErrNoPartials (which a following reader waits
// on). A table written before its index of lengths still answers for a
// length it holds.
func TestHasWindow(t *testing.T) {
	st := newStandIns(t)
	name := fmt.Sprintf("agg-lengths-%d-%d", time.Now().UnixNano(), names.Add(1))
	awstest.CreateTable(t, st.dc, PartialsTableSpec(name))
	table := &PartialsTable{API: st.dc, Table: name}
	ctx := t.Context()
	for _, c := range []struct {
		name  string
		store interface {
			partialStore
			HasWindow(context.Context, time.Duration) error
		}
	}{{"dir", &PartialsDir{Dir: filepath.Join(t.TempDir(), "partials")}}, {"table", table}} {
		if err := c.store.HasWindow(ctx, time.Minute); !errors.Is(err, ErrNoPartials) {
			t.Errorf("%s, nothing written: %v, want ErrNoPartials", c.name, err)
		}
		for _, size := range []time.Duration{10 * time.Second, time.Hour} {
			if err := c.store.Write(ctx, "shard-0", Output{Partial: NewPartial(t0, size, 10), From: 1, To: 2}); err != nil {
				t.Fatal(err)
			}
		}
		for _, size := range []time.Duration{10 * time.Second, time.Hour} {
			if err := c.store.HasWindow(ctx, size); err != nil {
				t.Errorf("%s, %v written: %v", c.name, size, err)
			}
		}
		err := c.store.HasWindow(ctx, time.Minute)
		if want := "holds no partials of 1m0s windows; it holds 10s, 1h0m0s: give --window"; err == nil || errors.Is(err, ErrNoPartials) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s, 1m asked: %v, want %q", c.name, err, want)
		}
	}
	// A writer killed between the lengths index and its first day: that
	// length holds nothing yet, and is not named as held.
	if _, err := table.calls().Put(ctx, &dynamodb.PutItemInput{Item: partialsKey(partialsLengthsKey, "5m0s")}); err != nil {
		t.Fatal(err)
	}
	err := table.HasWindow(ctx, 5*time.Minute)
	if want := "holds no partials of 5m0s windows; it holds 10s, 1h0m0s: give --window"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a length indexed with no day: %v, want %q", err, want)
	}
	// An older table: the day index alone.
	if _, err := table.calls().Put(ctx, &dynamodb.PutItemInput{Item: partialsKey("1s/"+partialsDaysKey, t0.Format(time.DateOnly))}); err != nil {
		t.Fatal(err)
	}
	if err := table.HasWindow(ctx, time.Second); err != nil {
		t.Errorf("a length with a day index and no entry among the lengths: %v", err)
	}
}

// BenchmarkPartialStores writes an hour of one-minute partials of three
// partitions (180 outputs) to each store, then reads the hour back merged
// (MergePartials), per op; the table is on dynalite over loopback, so its
// figures are the client's and the stand-in's costs, not DynamoDB's.
func BenchmarkPartialStores(b *testing.B) {
	parts := testPartials(t0, time.Minute, 60, 3)
	stores := []struct {
		name string
		new  func(b *testing.B) partialStore
	}{
		{"dir", func(b *testing.B) partialStore { return &PartialsDir{Dir: b.TempDir()} }},
		{"table", func(b *testing.B) partialStore {
			st := newStandIns(b)
			name := fmt.Sprintf("agg-bench-partials-%d-%d", time.Now().UnixNano(), names.Add(1))
			awstest.CreateTable(b, st.dc, PartialsTableSpec(name))
			return &PartialsTable{API: st.dc, Table: name}
		}},
	}
	for _, s := range stores {
		store := s.new(b)
		b.Run(s.name+"/write", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for partition, ps := range parts {
					for i, p := range ps {
						if err := store.Write(b.Context(), partition, Output{Partial: p, From: uint64(i), To: uint64(i)}); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
		})
		b.Run(s.name+"/read", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				got, problems, err := store.Read(b.Context(), time.Minute, t0, t0.Add(time.Hour))
				if err != nil || len(problems) > 0 || len(got) != 60 {
					b.Fatal(err, problems, len(got))
				}
			}
		})
	}
}
