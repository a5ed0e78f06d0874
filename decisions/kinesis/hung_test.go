package kinesis

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
)

// hangLimit is how long a test waits for progress that a hung stream must
// not hold up; a call to the hung stream is given far longer (Timeout) to
// fail, so that waiting for it shows.
const hangLimit = 30 * time.Second

// blackholeProxy returns a proxy in front of kinesalite that can hold
// calls unanswered, and a function that lets them go (reset) for good.
func blackholeProxy(t *testing.T, ep string) (*proxy, string, func()) {
	p := &proxy{target: ep, release: make(chan struct{}), held: make(chan struct{}, 64)}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	var once sync.Once
	release := func() {
		p.blackhole.Store(false)
		once.Do(func() { close(p.release) })
	}
	t.Cleanup(release) // before srv.Close, which waits for held calls
	return p, srv.URL, release
}

// hungSetup returns a 2-shard stream on kinesalite, a proxy in front of
// it that can hold calls (see blackholeProxy) and a Spill through the
// proxy whose calls are given far longer to fail than a test waits.
func hungSetup(t *testing.T) (*proxy, *Spill, string, func()) {
	ep := endpoint(t)
	stream := newStream(t, client(t, ep), 2)
	p, url, release := blackholeProxy(t, ep)
	var sl fakeSleep
	sink, err := New(client(t, url), Options{Stream: stream, Partitions: 8, MaxRetries: 1, Timeout: 10 * hangLimit, Sleep: sl.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := NewSpill(sink, SpillOptions{Dir: t.TempDir(), Retry: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return p, sp, stream, release
}

// await fails the test with the error done yields, or with failure if it
// yields nothing within hangLimit.
func await(t *testing.T, done <-chan error, failure string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangLimit):
		t.Fatal(failure)
	}
}

// numbered returns n generator events whose request ids count from first.
func numbered(g *decisiontest.Generator, first, n int) []decisions.Decision {
	ds := g.Batch(n)
	for i := range ds {
		ds[i].RequestID = fmt.Sprintf("e%d", first+i)
	}
	return ds
}

// countOnStream reads the stream and counts each request id.
func countOnStream(t *testing.T, kc *kinesis.Client, stream string) map[string]int {
	t.Helper()
	recs, err := readStream(kc, stream)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range recs {
		ds, err := Decode(r.Data, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			seen[d.RequestID]++
		}
	}
	return seen
}

// TestSpillHungDrainer: while the drainer's call hangs on an endpoint that
// accepts and never answers, WriteBatch goes on spilling at disk speed; it
// used to wait for the drainer's lock for as long as the call took.
func TestSpillHungDrainer(t *testing.T) {
	p, sp, stream, release := hungSetup(t)
	g := decisiontest.NewGenerator(31, start)
	p.down.Store(true) // resets: the first batch is given up and spilled
	if err := sp.WriteBatch(numbered(g, 0, 200)); err != nil {
		t.Fatal(err)
	}
	p.blackhole.Store(true)
	p.down.Store(false)
	select {
	case <-p.held:
	case <-time.After(hangLimit):
		t.Fatal("the drainer made no call")
	}
	done := make(chan error, 1)
	go func() {
		for b := 1; b <= 20; b++ {
			if err := sp.WriteBatch(numbered(g, b*200, 200)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	await(t, done, "WriteBatch waited for the drainer's hung call")
	if st := sp.Stats(); st.Spilled != 4200 || st.Backlog != 4200 {
		t.Fatalf("stats %+v, want 4200 spilled and waiting", st)
	}
	release()
	waitFor(t, "the backlog to drain", func() bool { return sp.Stats().Backlog == 0 })
	if err := sp.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	seen := countOnStream(t, client(t, endpoint(t)), stream)
	for i := range 4200 {
		if n := seen[fmt.Sprintf("e%d", i)]; n != 1 {
			t.Fatalf("event e%d on the stream %d times", i, n)
		}
	}
}

// TestHungStreamDoesNotStallTheLog: the local log and a Kinesis spill are
// lanes of one Fanout; the stream accepts connections and never answers.
// Decisions keep coming at ten times the log lane's queue; the log loses
// none, the Kinesis lane drops and counts, and once the stream answers
// again what the Kinesis lane took reaches it. Behind one Emitter and a
// Tee, the log's writes waited for the hung call and its queue overflowed.
func TestHungStreamDoesNotStallTheLog(t *testing.T) {
	p, sp, stream, release := hungSetup(t)
	p.blackhole.Store(true)
	logDir := t.TempDir()
	l, err := seglog.Open(logDir, seglog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := decisions.EmitterOptions{Queue: 256, Batch: 64, Interval: 10 * time.Millisecond, DropReport: time.Hour}
	f := decisions.NewFanout(
		decisions.Lane{Name: "log", Writer: decisionlog.NewWriter(l, decisionlog.WriterOptions{}), Options: opts},
		decisions.Lane{Name: "kinesis", Writer: sp, Options: opts})
	lanes := map[string]*decisions.Emitter{}
	f.Lanes(func(name string, e *decisions.Emitter) { lanes[name] = e })

	g := decisiontest.NewGenerator(32, start)
	const n = 2560
	for i := 0; i < n; i += 128 {
		for _, d := range numbered(g, i, 128) {
			f.Emit(d)
		}
		if i == 0 {
			<-p.held // the Kinesis lane is now stuck in its call
		}
		waitFor(t, "the local log to keep up while the stream hangs", func() bool {
			return lanes["log"].Stats().Written == uint64(i+128)
		})
	}
	kst := lanes["kinesis"].Stats()
	if kst.Dropped == 0 || kst.Emitted+kst.Dropped != n {
		t.Fatalf("kinesis lane %+v, want drops counted", kst)
	}
	release()
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the backlog to drain", func() bool { return sp.Stats().Backlog == 0 })
	if err := sp.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	r, err := decisionlog.Open(logDir, decisionlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := 0; ; i++ {
		d, _, err := r.Next(context.Background(), false)
		if decisionlog.IsEnd(err) {
			if i != n {
				t.Fatalf("local log holds %d decisions, want %d", i, n)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("e%d", i); d.RequestID != want {
			t.Fatalf("local log decision %d is %s, want %s", i, d.RequestID, want)
		}
	}
	seen := countOnStream(t, client(t, endpoint(t)), stream)
	got := 0
	for id, c := range seen {
		if c != 1 && id != "" {
			t.Errorf("event %s on the stream %d times", id, c)
		}
		got += c
	}
	// The lane's writes and, at Close, its report of the drops.
	if want := int(lanes["kinesis"].Stats().Written) + 1; got != want || seen[""] != 1 {
		t.Errorf("%d events on the stream, want the %d the Kinesis lane took and a drop report", got, want)
	}
}

// TestSpillInterrupt: a batch on its way to a stream that never answers
// is spilled as soon as the Spill is interrupted, and so is every later
// one, so that a shutdown need not wait for the stream.
func TestSpillInterrupt(t *testing.T) {
	p, sp, _, _ := hungSetup(t)
	p.blackhole.Store(true)
	g := decisiontest.NewGenerator(33, start)
	done := make(chan error, 1)
	go func() { done <- sp.WriteBatch(numbered(g, 0, 100)) }()
	<-p.held
	sp.Interrupt()
	await(t, done, "WriteBatch still waits for the stream after Interrupt")
	if err := sp.WriteBatch(numbered(g, 100, 100)); err != nil {
		t.Fatal(err)
	}
	if st := sp.Stats(); st.Spilled != 200 || st.Dropped != 0 {
		t.Fatalf("stats %+v, want 200 spilled", st)
	}
	if err := sp.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
