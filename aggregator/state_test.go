package aggregator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/decisions/stream"
	"github.com/ratewarden/ratewarden/internal/dirlock"
)

// testStateStore is the conformance suite of StateStore: every
// implementation runs it.
func testStateStore(t *testing.T, newStore func(t *testing.T) StateStore) {
	ctx := context.Background()
	p := NewPartial(t0, time.Second, 10)
	for _, d := range testEvents(50) {
		p.Update(&d)
	}
	big := make([]byte, 900<<10) // chunked by a table
	for i := range big {
		big[i] = byte(rand.Uint32())
	}
	states := []State{
		{Snapshot: []byte("RWR-snapshot")},
		{Snapshot: []byte("s"), Pending: []Output{{Partial: p, From: 3, To: 9}, {Partial: p, Correction: true, From: 10, To: 10}}, Cursor: []byte("cursor")},
		{Snapshot: big, Cursor: []byte{0}},
		{Snapshot: []byte("small again")},
	}
	same := func(t *testing.T, got, want State) {
		t.Helper()
		gb, err := appendState(nil, got)
		if err != nil {
			t.Fatal(err)
		}
		wb, _ := appendState(nil, want)
		if !slices.Equal(gb, wb) {
			t.Fatalf("loaded a state of %d bytes encoded, saved %d", len(gb), len(wb))
		}
	}
	t.Run("missing", func(t *testing.T) {
		if _, ok, err := newStore(t).Load(ctx, "nothing"); ok || err != nil {
			t.Fatalf("ok %v, err %v: want no state", ok, err)
		}
	})
	t.Run("saves replace", func(t *testing.T) {
		s := newStore(t)
		for i, st := range states {
			if err := s.Save(ctx, "shardId-000000000001", st); err != nil {
				t.Fatalf("save %d: %v", i, err)
			}
			got, ok, err := s.Load(ctx, "shardId-000000000001")
			if !ok || err != nil {
				t.Fatalf("load %d: ok %v, %v", i, ok, err)
			}
			same(t, got, st)
		}
	})
	t.Run("partitions apart, concurrently", func(t *testing.T) {
		s := newStore(t)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				for j := range 5 {
					if err := s.Save(ctx, fmt.Sprint("p", i), State{Snapshot: fmt.Appendf(nil, "%d-%d", i, j)}); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		for i := range 4 {
			got, ok, err := s.Load(ctx, fmt.Sprint("p", i))
			if !ok || err != nil || string(got.Snapshot) != fmt.Sprint(i, "-4") {
				t.Fatalf("partition %d: %q, %v, %v", i, got.Snapshot, ok, err)
			}
		}
	})
}

func TestStateDir(t *testing.T) {
	testStateStore(t, func(t *testing.T) StateStore { return &StateDir{Dir: t.TempDir()} })
	// Two holders of one partition (two processes sharing the directory
	// while a lease changes hands): the one that did not read the
	// other's save cannot overwrite it. Before, the last to save won
	// whatever it had read, and the state went back.
	dir := t.TempDir()
	testStateMoved(t, func() StateStore { return &StateDir{Dir: dir} })
}

// testStateMoved: of two stores of one partition's state made by
// newStore, the one that did not read the other's save cannot save over
// it (ErrStateMoved), nor can one that never read the state.
func testStateMoved(t *testing.T, newStore func() StateStore) {
	t.Helper()
	ctx := context.Background()
	a, b := newStore(), newStore()
	if _, _, err := a.Load(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(ctx, "p", State{Snapshot: []byte("a1")}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Load(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if err := b.Save(ctx, "p", State{Snapshot: []byte("b1")}); err != nil {
		t.Fatal(err)
	}
	movedFor := func(s StateStore) bool {
		t.Helper()
		moved, err := s.(stateWatcher).moved(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		return moved
	}
	if !movedFor(a) || movedFor(b) {
		t.Fatal("stateWatcher: a did not see b's save, or b saw its own")
	}
	if err := a.Save(ctx, "p", State{Snapshot: []byte("a2")}); !errors.Is(err, ErrStateMoved) {
		t.Fatalf("a saved over b's state: %v", err)
	}
	if err := newStore().Save(ctx, "p", State{}); !errors.Is(err, ErrStateMoved) {
		t.Fatalf("a store that never read the state saved over it: %v", err)
	}
	if got, _, _ := a.Load(ctx, "p"); string(got.Snapshot) != "b1" {
		t.Fatalf("state %q, want b's", got.Snapshot)
	}
	if movedFor(a) {
		t.Fatal("stateWatcher: a, having read b's state, says it moved")
	}
	if err := a.Save(ctx, "p", State{Snapshot: []byte("a3")}); err != nil {
		t.Fatalf("a, having read b's state, could not save: %v", err)
	}
}

// newStateTable creates a state table on dynalite, deleted after the test.
func newStateTable(t testing.TB, s standIns) string {
	name := fmt.Sprintf("agg-state-%d-%d", time.Now().UnixNano(), names.Add(1))
	awstest.CreateTable(t, s.dc, StateTableSpec(name))
	return name
}

func TestStateTable(t *testing.T) {
	s := newStandIns(t)
	table := newStateTable(t, s)
	testStateStore(t, func(t *testing.T) StateStore {
		return &StateTable{API: s.dc, Table: table, Prefix: fmt.Sprint("suite-", names.Add(1))}
	})
	// Two holders of one partition: the one that did not read the
	// other's save cannot overwrite it.
	testStateMoved(t, func() StateStore { return &StateTable{API: s.dc, Table: table, Prefix: "moved"} })
}

// TestOpenNamesTheState: a partition whose state loads but cannot be
// restored (a snapshot of windows of another length, a cursor that does
// not decode) fails to open with an error that names where the state is
// kept: the file of a StateDir, the table and key of a StateTable.
func TestOpenNamesTheState(t *testing.T) {
	ctx := context.Background()
	r := NewRollup(Options{Window: time.Second})
	for i, d := range testEvents(200) {
		r.Add(&d, uint64(i))
	}
	snap, err := r.AppendSnapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := newStandIns(t)
	table := newStateTable(t, s)
	stores := []struct {
		name  string
		store StateStore
		where string
	}{
		{"dir", &StateDir{Dir: dir}, "state " + filepath.Join(dir, "p.state") + ": "},
		{"table", &StateTable{API: s.dc, Table: table, Prefix: "named"}, "state in table " + table + `, key partition "named/p": `},
	}
	for _, st := range stores {
		for _, c := range []struct {
			name   string
			state  State
			window time.Duration
			want   string
		}{
			{"window", State{Snapshot: snap}, 2 * time.Second, "restore rollup: a window of 1s, configured 2s"},
			{"cursor", State{Snapshot: snap, Cursor: []byte{0xff}}, time.Second, "cursor: "},
		} {
			if err := st.store.Save(ctx, "p", c.state); err != nil {
				t.Fatal(err)
			}
			h, err := newPartitions(RunOptions{Store: st.store, Rollup: Options{Window: c.window}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = h.Open(ctx, "p", stream.Position{})
			if err == nil || !strings.Contains(err.Error(), st.where+c.want) {
				t.Errorf("%s, %s: %v, want an error holding %q", st.name, c.name, err, st.where+c.want)
			}
		}
	}
}

// TestStateRefusesWhatNoWriterMakes: under a valid checksum, a state whose
// pending output has a correction byte other than 0 or 1, or a snapshot
// that holds one window twice, is refused rather than read as something
// else (the byte as false; the last of the two windows).
func TestStateRefusesWhatNoWriterMakes(t *testing.T) {
	p := NewPartial(t0, time.Second, 10)
	for _, d := range testEvents(20) {
		p.Update(&d)
	}
	t.Run("correction byte", func(t *testing.T) {
		for _, c := range []byte{0, 1, 2, 255} {
			b := []byte(stateMagic)
			b = append(b, stateVersion)
			b = appendBytes(b, []byte("RWR"))
			b = appendUvarint(b, 1) // one pending output
			b = append(b, c)
			b = appendUvarint(b, 3)
			b = appendUvarint(b, 9)
			b, _ = appendPartial(b, p, false)
			b = appendBytes(b, nil)            // no cursor
			b = withCRC(append(b, 0, 0, 0, 0)) // room for the checksum
			st, err := decodeState(b)
			if (c <= 1) != (err == nil) {
				t.Fatalf("correction byte %d: %v", c, err)
			}
			if err == nil && st.Pending[0].Correction != (c == 1) {
				t.Fatalf("correction byte %d read as %v", c, st.Pending[0].Correction)
			}
		}
	})
	t.Run("window twice", func(t *testing.T) {
		snapshot := func(windows int) []byte {
			b := append([]byte(snapshotMagic), snapshotVersion)
			b = appendUvarint(b, 21)
			b = appendUvarint(b, uint64(t0.Add(time.Second).UnixNano()))
			b = appendUvarint(b, uint64((time.Time{}).UnixNano()))
			b = appendUvarint(b, uint64(windows))
			for range windows {
				b = appendUvarint(b, 0)
				b = appendUvarint(b, 19)
				b, _ = appendPartial(b, p, true)
				b = p.Offenders.appendFilters(b)
			}
			for range 1 + 7 + 1 + 1 + 2 + 1 { // no late windows; the counts; nothing held or emitted ahead; no bad time
				b = appendUvarint(b, 0)
			}
			return b
		}
		if err := NewRollup(Options{Window: time.Second, TopK: 10}).Restore(snapshot(1)); err != nil {
			t.Fatalf("one window: %v", err)
		}
		err := NewRollup(Options{Window: time.Second, TopK: 10}).Restore(snapshot(2))
		if err == nil || !strings.Contains(err.Error(), "twice") {
			t.Fatalf("one window twice: %v, want it refused", err)
		}
	})
}

// TestStatePartialChecksum: under a valid state checksum, a state whose
// pending output's partial, or whose snapshot's window, fails its own
// checksum is refused as a corrupt state is, not resumed with other
// counts: Load names the file, and a Rollup does not restore the
// snapshot.
func TestStatePartialChecksum(t *testing.T) {
	seed := stateSeed(t, time.Second)
	st, err := decodeState(seed)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRollup(Options{Window: time.Second, Lateness: 100 * time.Millisecond, TopK: 2})
	if err := r.Restore(st.Snapshot); err != nil {
		t.Fatal(err)
	}
	if len(st.Pending) == 0 || len(r.open) == 0 {
		t.Fatalf("the seed holds %d pending outputs and %d open windows, want some of each", len(st.Pending), len(r.open))
	}
	window, err := r.open[sortedKeys(r.open)[0]].p.appendBinary(nil, true) // as snapshots hold it
	if err != nil {
		t.Fatal(err)
	}
	// damaged returns the seed with the partial enc in it damaged, under
	// a valid state checksum.
	damaged := func(t *testing.T, enc []byte) []byte {
		t.Helper()
		at := bytes.Index(seed, enc)
		if at < 0 {
			t.Fatal("the partial is not in the state")
		}
		return withCRC(slices.Concat(seed[:at], eventsFlipped(t, enc), seed[at+len(enc):]))
	}
	t.Run("pending", func(t *testing.T) {
		s := &StateDir{Dir: t.TempDir()}
		writeFile(t, s.path("p"), damaged(t, encode(t, st.Pending[0].Partial)))
		_, ok, err := s.Load(t.Context(), "p")
		if ok || err == nil || !strings.Contains(err.Error(), "checksum mismatch") || !strings.Contains(err.Error(), s.path("p")) {
			t.Fatalf("ok %v, %v: want the state refused, its file named", ok, err)
		}
	})
	t.Run("snapshot", func(t *testing.T) {
		st, err := decodeState(damaged(t, window))
		if err != nil {
			t.Fatal(err) // the snapshot's bytes are the Rollup's to read
		}
		err = NewRollup(Options{Window: time.Second, Lateness: 100 * time.Millisecond, TopK: 2}).Restore(st.Snapshot)
		if err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
			t.Fatalf("restored: %v, want a checksum mismatch", err)
		}
	})
}

// TestLockStateDir: a state directory held is refused to a second
// holder, naming the directory and the pid and saying why; one that
// cannot be locked at all (a file) is an error without that advice; a
// lock closed lets the directory go.
func TestLockStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	lk, err := LockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockStateDir(dir)
	if !errors.Is(err, dirlock.ErrLocked) || !strings.Contains(err.Error(), dir) ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) || !strings.Contains(err.Error(), "one process per state directory") {
		t.Errorf("second LockStateDir = %v", err)
	}
	if err := lk.Close(); err != nil {
		t.Fatal(err)
	}
	lk, err = LockStateDir(dir)
	if err != nil {
		t.Fatalf("LockStateDir after Close: %v", err)
	}
	lk.Close()
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := LockStateDir(file); err == nil || errors.Is(err, dirlock.ErrLocked) || strings.Contains(err.Error(), "one process") {
		t.Errorf("LockStateDir(a file) = %v, want its own error", err)
	}
}

// TestStateTableLoadWhileSaved: a holder saves a chunked state over and
// over while another loads it (a new holder waiting for the old one to
// deliver, see partitionRun.awaitPending). A load that meets the chunks
// of a generation the save has just deleted reads the state again: every
// load returns one of the states saved, whole. Before, such a load failed
// with "chunk 0 of generation N is missing". A chunk missing under a head
// that does not move is still an error.
func TestStateTableLoadWhileSaved(t *testing.T) {
	s := newStandIns(t)
	table := newStateTable(t, s)
	ctx := context.Background()
	snap := func(i int) []byte {
		b := make([]byte, 900<<10) // chunked
		for j := range b {
			b[j] = byte(i)
		}
		return b
	}
	saver := &StateTable{API: s.dc, Table: table, Prefix: "torn"}
	if err := saver.Save(ctx, "p", State{Snapshot: snap(0)}); err != nil {
		t.Fatal(err)
	}
	const saves = 12
	done := make(chan error, 1)
	go func() {
		for i := 1; i <= saves; i++ {
			if err := saver.Save(ctx, "p", State{Snapshot: snap(i)}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	loader := &StateTable{API: s.dc, Table: table, Prefix: "torn"}
	loads := 0
	for last := -1; last < saves; loads++ {
		st, ok, err := loader.Load(ctx, "p")
		if err != nil || !ok {
			t.Fatalf("load %d, after state %d: ok %v, %v", loads, last, ok, err)
		}
		i := int(st.Snapshot[0])
		if !bytes.Equal(st.Snapshot, snap(i)) || i < last {
			t.Fatalf("load %d: a state of %d bytes, not one saved whole, or older than %d", loads, len(st.Snapshot), last)
		}
		last = i
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d loads over %d saves", loads, saves)
	// A chunk gone under a head that stays.
	_, err := s.dc.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: loader.key("p", chunkItem(saves+1, 0))})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := loader.Load(ctx, "p"); err == nil || !strings.Contains(err.Error(), "chunk 0 of generation 13 is missing") {
		t.Fatalf("a state whose chunk is gone loaded: %v", err)
	}
}
