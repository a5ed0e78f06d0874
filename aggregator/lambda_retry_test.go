package aggregator

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// TestKinesisLambdaRetryExtents: a sink fails once, at any of the first
// writes, and Lambda's retries from the record the invocation names
// deliver other extents than the failed one: fewer records (as
// BisectBatchOnFunctionError and a smaller batch do), more (new records
// arrived), or the same. Whatever the extents, every window's stored
// partials merge to the counts and distinct clients of a run that never
// failed: nothing is lost and nothing counted twice. It holds with commit
// groups of the whole invocation and of about three or four records, with
// window caps that cut groups between records, and with a record whose
// events alone pass the caps (cut within it); and for a function error,
// retried from the batch's first record in halves (crash cases). A group
// never holds more windows at once than twice a record's reach.
func TestKinesisLambdaRetryExtents(t *testing.T) {
	ds := backlog(19, 6001, 12) // 12 Arrow records of 500, 1 JSON, 1 corrupt
	hostile := backlog(19, 6001, 12)
	for i := 2000; i < 2500; i += 25 { // in record 4, far windows ahead and behind by turns
		off := time.Duration(100+i) * time.Second
		if i%2 == 1 {
			off = -off
		}
		hostile[i].Time = t0.Add(off)
	}
	// Records whose first events share a window, each with a few events
	// a window further ahead than the record before it: the windows a
	// group holds grow with the records it has taken, wherever it began.
	stray := backlog(19, 6001, 1)
	for r := range 12 {
		for k := range 5 {
			stray[500*r+100+k].Time = t0.Add(time.Duration(r+1)*time.Second + time.Duration(k)*time.Millisecond)
		}
	}
	for _, c := range []struct {
		name    string
		ev      events.KinesisEvent
		commit  int
		capN    int
		extents []int // records per invocation, the first failing; the last repeats
		crash   bool  // a failure is a function error: Lambda retries the whole batch
	}{
		{"whole/shorter", kinesisEvent(t, ds), 0, 0, []int{14, 3, 2, 14}, false},
		{"whole/longer", kinesisEvent(t, ds), 0, 0, []int{5, 9, 14}, false},
		{"whole/halves", kinesisEvent(t, ds), 0, 0, []int{14, 7, 4, 2, 1, 14}, false},
		{"groups/shorter", kinesisEvent(t, ds), 3, 0, []int{14, 4, 1, 14}, false},
		{"groups/longer", kinesisEvent(t, ds), 3, 0, []int{4, 8, 14}, false},
		{"caps/shorter", kinesisEvent(t, ds), 0, 1, []int{14, 1, 2, 14}, false},
		{"caps/longer", kinesisEvent(t, ds), 4, 1, []int{6, 10, 14}, false},
		{"hostile/shorter", kinesisEvent(t, hostile), 0, 1, []int{14, 1, 3, 14}, false},
		{"hostile/longer", kinesisEvent(t, hostile), 3, 2, []int{5, 9, 14}, false},
		// A function error (a timeout, a crash) retries the batch from its
		// first record, in halves with BisectBatchOnFunctionError: a half
		// that begins inside a commit group cuts the groups after it at
		// the same records (kinesis.StartsCommitGroup, a backlog's epochs,
		// the records that strayed, see lambdaRun.enter). The stray cases
		// failed when a group was cut where the windows it held since its
		// first record passed the caps.
		{"crash/halves", kinesisEvent(t, ds), 0, 0, []int{14, 7, 4, 2, 14}, true},
		{"crash/longer", kinesisEvent(t, ds), 0, 0, []int{6, 14}, true},
		{"crash/groups", kinesisEvent(t, ds), 3, 0, []int{14, 7, 14}, true},
		{"crash/groups-halves", kinesisEvent(t, ds), 4, 0, []int{14, 7, 3, 14}, true},
		{"crash/caps", kinesisEvent(t, ds), 0, 1, []int{14, 7, 14}, true},
		{"crash/caps-halves", kinesisEvent(t, ds), 0, 2, []int{12, 6, 3, 14}, true},
		{"crash/hostile", kinesisEvent(t, hostile), 0, 1, []int{14, 5, 14}, true},
		{"crash/stray", kinesisEvent(t, stray), 0, 2, []int{14, 7, 14}, true},
		{"crash/stray-halves", kinesisEvent(t, stray), 0, 3, []int{14, 7, 3, 14}, true},
		{"stray/shorter", kinesisEvent(t, stray), 0, 2, []int{14, 5, 2, 14}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			newLambda := func(s Sink) *KinesisLambda {
				return &KinesisLambda{Sinks: []Sink{s}, Window: time.Second, CommitRecords: c.commit,
					MaxAhead: c.capN, MaxCorrections: c.capN}
			}
			clean := t.TempDir()
			deliver(t, newLambda(&PartialsDir{Dir: clean}), c.ev, []int{len(c.ev.Records)}, false)
			want := windowsOf(t, clean)
			var cleanWrites counting
			deliver(t, newLambda(&cleanWrites), c.ev, []int{len(c.ev.Records)}, false)
			checkHeld(t, cleanWrites, cmp.Or(c.capN, DefaultMaxAhead))
			// Every one of the first writes fails in turn, then every
			// stride-th.
			failures, stride := 0, max(1, cleanWrites.n/16)
			for n := 1; n <= cleanWrites.n; n = next(n, stride) {
				dir := t.TempDir()
				s := &failNth{Sink: &PartialsDir{Dir: dir}, n: n}
				if deliver(t, newLambda(s), c.ev, c.extents, c.crash) > 0 {
					failures++
				}
				got := windowsOf(t, dir)
				for start, w := range want {
					if g := got[start]; g != w {
						t.Fatalf("failing at write %d of %d: window %v differs from a run without failure:\n%.200s\nwant\n%.200s", n, cleanWrites.n, start, g, w)
					}
				}
				if len(got) != len(want) {
					t.Fatalf("failing at write %d: %d windows, want %d", n, len(got), len(want))
				}
			}
			if failures == 0 {
				t.Fatal("no delivery failed: the test proves nothing")
			}
		})
	}
}

// TestKinesisLambdaRetryRandom is TestKinesisLambdaRetryExtents on
// random cases: events over a random number of windows, some late by a
// few windows and a few stamped far away; random caps and commit groups;
// a sink failing at the first write and at three random ones of the run;
// retries of random extents from the record the invocation names (a
// partial batch failure) and from the batch's first record (a function
// error, retried in parts as BisectBatchOnFunctionError does). Each
// case's seed is in its name.
func TestKinesisLambdaRetryRandom(t *testing.T) {
	for seed := range uint64(16) {
		r := rand.New(rand.NewPCG(seed, 0x1a3b))
		windows := 2 + r.IntN(40)
		ds := backlog(100+seed, 2001+r.IntN(3000), windows)
		for i := range ds {
			switch p := r.IntN(1000); {
			case p < 40: // late by up to three windows
				ds[i].Time = ds[i].Time.Add(-time.Duration(r.IntN(3000)) * time.Millisecond)
			case p < 45: // far away, either way
				ds[i].Time = ds[i].Time.Add(time.Duration(r.IntN(2000)-1000) * time.Hour)
			}
		}
		ev := kinesisEvent(t, ds)
		capN := []int{1, 2, 3, 8, 256}[r.IntN(5)]
		commit := []int{0, 0, 1, 2, 3, 5}[r.IntN(6)]
		// The whole batch, then a retry of at most half of it (as a bisect
		// makes), then any.
		extents := []int{len(ev.Records), 1 + r.IntN(len(ev.Records)/2)}
		for range 2 {
			extents = append(extents, 1+r.IntN(len(ev.Records)))
		}
		picks := []float64{r.Float64(), r.Float64(), r.Float64()}
		t.Run(fmt.Sprintf("seed%d/windows%d/caps%d/commit%d", seed, windows, capN, commit), func(t *testing.T) {
			t.Parallel()
			newLambda := func(s Sink) *KinesisLambda {
				return &KinesisLambda{Sinks: []Sink{s}, Window: time.Second, CommitRecords: commit, MaxAhead: capN, MaxCorrections: capN}
			}
			clean := t.TempDir()
			deliver(t, newLambda(&PartialsDir{Dir: clean}), ev, []int{len(ev.Records)}, false)
			want := windowsOf(t, clean)
			// The first write, and three anywhere in the run.
			var writes counting
			deliver(t, newLambda(&writes), ev, []int{len(ev.Records)}, false)
			checkHeld(t, writes, capN)
			failAt := []int{1}
			for _, f := range picks {
				failAt = append(failAt, 1+int(f*float64(writes.n)))
			}
			for _, crash := range []bool{false, true} {
				for _, n := range failAt {
					dir := t.TempDir()
					if deliver(t, newLambda(&failNth{Sink: &PartialsDir{Dir: dir}, n: n}), ev, extents, crash) == 0 && n == 1 {
						t.Fatal("failing the first write failed no invocation")
					}
					got := windowsOf(t, dir)
					if len(got) != len(want) {
						t.Fatalf("crash %v, failing at write %d, extents %v: %d windows, want %d", crash, n, extents, len(got), len(want))
					}
					for start, w := range want {
						if got[start] != w {
							t.Fatalf("crash %v, failing at write %d, extents %v: window %v differs from a run without failure", crash, n, extents, start)
						}
					}
				}
			}
		})
	}
}

// checkHeld checks that no group of the run w counted held more windows
// at once than twice a record's reach with both caps capN: the windows in
// its records' reach, and a straying record's own (as many at most).
func checkHeld(t *testing.T, w counting, capN int) {
	t.Helper()
	if bound := 2 * (2*capN + 1); w.most > bound {
		t.Errorf("a group held %d windows at once, want at most %d", w.most, bound)
	}
}

// next is the write to fail after n: the next while n < 16, then n +
// stride.
func next(n, stride int) int {
	if n < 16 {
		return n + 1
	}
	return n + stride
}

// deliver plays a Kinesis event-source mapping of one shard on l: the
// k-th invocation holds extents[k] records (the last extent repeats, and
// an extent is cut at the last record) from the shard's position, which
// moves past an invocation that succeeds and to the record a failing one
// names, or with crash stays at its first record (a function error,
// whatever it stored). It returns how many invocations failed.
func deliver(t *testing.T, l *KinesisLambda, ev events.KinesisEvent, extents []int, crash bool) (failed int) {
	t.Helper()
	pos := 0
	for k := 0; pos < len(ev.Records); k++ {
		if k > 100 {
			t.Fatal("more than 100 invocations")
		}
		n := extents[min(k, len(extents)-1)]
		end := min(pos+n, len(ev.Records))
		resp, err := l.Handle(context.Background(), events.KinesisEvent{Records: ev.Records[pos:end]})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.BatchItemFailures) == 0 {
			pos = end
			continue
		}
		failed++
		at := resp.BatchItemFailures[0].ItemIdentifier
		next := -1
		for i := pos; i < end; i++ {
			if ev.Records[i].Kinesis.SequenceNumber == at {
				next = i
			}
		}
		if next < 0 {
			t.Fatalf("failure at %s, not a record of the invocation", at)
		}
		if !crash {
			pos = next
		}
	}
	return failed
}

// windowsOf reads the partials under dir merged by window, each as the
// encodings of its events, counts and distinct clients: what a partial
// merged from any split of the same events holds alike.
func windowsOf(t *testing.T, dir string) map[time.Time]string {
	t.Helper()
	// The cases stamp events up to 1,000 h either side of t0.
	ps, problems, err := (&PartialsDir{Dir: dir}).Read(t.Context(), time.Second, t0.Add(-2000*time.Hour), t0.Add(2000*time.Hour))
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	out := map[time.Time]string{}
	for start, p := range ps {
		counts, _ := p.Counts.AppendBinary(nil)
		clients, _ := p.Clients.AppendBinary(nil)
		out[start] = fmt.Sprintf("events %d counts %x clients %x", p.Events, bytes.Clone(counts), clients)
	}
	return out
}

// failNth fails its n-th Write, once.
type failNth struct {
	Sink
	n, writes int
}

func (s *failNth) Write(ctx context.Context, partition string, o Output) error {
	s.writes++
	if s.writes == s.n {
		return errors.New("sink down")
	}
	return s.Sink.Write(ctx, partition, o)
}

// counting counts the writes it is given, and the most between two
// flushes: the windows a group held at once.
type counting struct{ n, part, most int }

func (c *counting) Write(context.Context, string, Output) error {
	c.n++
	c.part++
	c.most = max(c.most, c.part)
	return nil
}

func (c *counting) Flush(context.Context) error { c.part = 0; return nil }
