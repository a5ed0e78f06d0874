package lists

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/gofrs/flock"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
)

// store is what every list store provides: the writers' methods, the
// reader's, and a Source for a Watcher.
type store interface {
	Put(ctx context.Context, e Entry) error
	Remove(ctx context.Context, list, target, by, reason string) error
	Approve(ctx context.Context, list, target, by string) error
	Entries(ctx context.Context, list string) ([]Entry, error)
	Source
}

var (
	_ store = (*fileStore)(nil)
	_ store = (*TableStore)(nil)
)

// fileSource makes a FileStore a Source, as assemble does: a FileSource per list.
type fileStore struct {
	*FileStore
	mu  sync.Mutex
	src map[string]*FileSource
}

func (f *fileStore) Read(ctx context.Context, list string, ifChanged bool) ([]Entry, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.src[list] == nil {
		f.src[list] = f.Source(list)
	}
	return f.src[list].Read(ctx, list, ifChanged)
}

func (f *fileStore) Name() string { return "files" }

// clock is a settable clock for stores and watchers.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock { c := &clock{}; c.set(t); return c }
func (c *clock) set(t time.Time)  { c.ns.Store(t.UnixNano()) }
func (c *clock) now() time.Time   { return time.Unix(0, c.ns.Load()).UTC() }

func newFileStore(t *testing.T, now func() time.Time) store {
	dir := t.TempDir()
	paths := map[string]string{}
	for _, n := range Names {
		paths[n] = filepath.Join(dir, n+".list")
		if err := os.WriteFile(paths[n], []byte("# "+n+" list\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &fileStore{FileStore: NewFileStore(paths, now), src: map[string]*FileSource{}}
}

var tableSeq atomic.Int64

func newTableStore(t *testing.T, now func() time.Time) store {
	ep := awstest.Endpoint(t, awstest.DynamoDBEnv)
	db := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(ep) })
	name := fmt.Sprintf("lists-test-%d-%d", os.Getpid(), tableSeq.Add(1))
	awstest.CreateTable(t, db, TableSpec(name))
	return NewTableStore(db, name, now)
}

// recorder collects feedback events.
type recorder struct {
	mu sync.Mutex
	ds []decisions.Decision
}

func (r *recorder) Emit(d decisions.Decision) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ds = append(r.ds, d)
	return true
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, d := range r.ds {
		out = append(out, fmt.Sprintf("%s %s %s by=%s ttl=%v reason=%q", d.List, d.Action, d.Target, d.Node, d.TTL, d.Reason))
	}
	r.ds = nil
	return out
}

func TestStores(t *testing.T) {
	for name, open := range map[string]func(*testing.T, func() time.Time) store{"file": newFileStore, "table": newTableStore} {
		t.Run(name, func(t *testing.T) { testStore(t, open) })
	}
}

// testStore is the conformance suite every list store runs: writes, reads
// through a Watcher at its refresh, expiry compared by the reader, and one
// feedback event per change.
func testStore(t *testing.T, open func(*testing.T, func() time.Time) store) {
	ctx := context.Background()
	clk := newClock(t0)
	s := open(t, clk.now)
	var rec recorder
	w, err := WatchSource(s, WatchOptions{List: Challenge, Record: &rec, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	a, u := addrA, "user:bob"
	in := func(step string, addr, user bool) {
		t.Helper()
		if err := w.Reload(); err != nil {
			t.Fatalf("%s: Reload: %v", step, err)
		}
		l := w.List()
		if got, gotU := l.ContainsAt(a, "", clk.now()), l.ContainsAt(netip.Addr{}, "bob", clk.now()); got != addr || gotU != user {
			t.Errorf("%s: contains address %v, user %v; want %v, %v", step, got, gotU, addr, user)
		}
	}
	events := func(step string, want ...string) {
		t.Helper()
		if got := rec.take(); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: events\n%s\nwant\n%s", step, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	in("empty", false, false)

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Put(ctx, Entry{List: Challenge, Target: "::ffff:203.0.113.7", By: "alice", Reason: "scraper"}))
	must(s.Put(ctx, Entry{List: Challenge, Target: u, By: "policy:p", Reason: "stuffing", Expires: t0.Add(30 * time.Minute), Pending: true}))
	must(s.Put(ctx, Entry{List: Deny, Target: "198.51.100.0/24", By: "alice"})) // another list: not this watcher's
	in("added", true, false)
	events("added", `challenge add 203.0.113.7 by=alice ttl=0s reason="scraper"`)

	clk.set(t0.Add(time.Minute))
	must(s.Approve(ctx, Challenge, u, "carol"))
	in("approved", true, true)
	events("approved", `challenge add user:bob by=carol ttl=29m0s reason="stuffing"`)
	if err := s.Approve(ctx, Challenge, u, "carol"); !errors.Is(err, ErrNotPending) {
		t.Errorf("second Approve: %v, want ErrNotPending", err)
	}

	in("unchanged", true, true)
	events("unchanged")

	clk.set(t0.Add(30 * time.Minute)) // bob's entry expires: no event, it carried its TTL
	in("expired", true, false)
	events("expired")
	if err := s.Remove(ctx, Challenge, u, "dave", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("Remove of an expired entry: %v, want ErrNotFound", err)
	}

	must(s.Remove(ctx, Challenge, "203.0.113.7", "dave", "a false positive"))
	in("removed", false, false)
	events("removed", `challenge remove 203.0.113.7 by=dave ttl=0s reason="a false positive"`)
	if err := s.Remove(ctx, Challenge, "203.0.113.7", "dave", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Remove: %v, want ErrNotFound", err)
	}

	must(s.Put(ctx, Entry{List: Challenge, Target: "203.0.113.7", By: "erin", Expires: t0.Add(2 * time.Hour)}))
	in("added again", true, false)
	events("added again", `challenge add 203.0.113.7 by=erin ttl=1h30m0s reason=""`)

	es, err := s.Entries(ctx, Challenge)
	must(err)
	if len(es) != 2 {
		t.Errorf("Entries = %+v, want 2 (bob, expired, and 203.0.113.7)", es)
	}

	// Refused writes change nothing.
	for _, e := range []Entry{
		{List: Challenge, Target: "203.0.113.8", Expires: t0}, // expiry in the past
		{List: Challenge, Target: "10.0.0.1/8"},
		{List: "grey", Target: "203.0.113.8"},
		{List: Challenge, Target: "user:a\n203.0.113.8"},
		{List: Challenge, Target: "203.0.113.8", Reason: "a\nb"},
	} {
		if err := s.Put(ctx, e); err == nil {
			t.Errorf("Put(%+v) accepted", e)
		}
	}
	in("refused writes", true, false)
	events("refused writes")
	must(w.Close(ctx))
}

// TestFileStoreConcurrentWriters has writers with stores of their own (as
// separate processes would be) put entries at once: the lock beside the
// file keeps every one.
func TestFileStoreConcurrentWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deny.list")
	const writers, each = 6, 15
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			s := NewFileStore(map[string]string{Deny: path}, nil)
			for j := range each {
				if err := s.Put(context.Background(), Entry{List: Deny, Target: fmt.Sprintf("198.51.%d.%d", i, j), By: "w"}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	es, err := NewFileStore(map[string]string{Deny: path}, nil).Entries(context.Background(), Deny)
	if err != nil || len(es) != writers*each {
		t.Fatalf("%d entries, %v; want %d", len(es), err, writers*each)
	}
}

// TestFileStoreKeepsWhatItDoesNotChange: comments and other lines stay as
// they were, and a bad file is refused, not overwritten.
func TestFileStoreKeepsWhatItDoesNotChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allow.list")
	orig := "# partners\n198.51.100.0/24   # acme\nuser:old by=x\n"
	if err := os.WriteFile(path, []byte(orig), 0o600); err != nil {
		t.Fatal(err)
	}
	s := NewFileStore(map[string]string{Allow: path}, func() time.Time { return t0 })
	if err := s.Put(context.Background(), Entry{List: Allow, Target: " user:old", By: "y"}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if want := "# partners\n198.51.100.0/24   # acme\nuser:old added=2026-12-01T17:00:00Z by=y\n"; string(got) != want {
		t.Errorf("file after Put:\n%s\nwant\n%s", got, want)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600 kept", fi.Mode().Perm())
	}
	bad := orig + "203.0.113.300\n"
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	err := s.Put(context.Background(), Entry{List: Allow, Target: "203.0.113.1"})
	if err == nil || !strings.Contains(err.Error(), path+`:4: "203.0.113.300"`) {
		t.Errorf("Put into a bad file: %v, want an error naming %s:4", err, path)
	}
	if got, _ := os.ReadFile(path); string(got) != bad {
		t.Errorf("a bad file was rewritten:\n%s", got)
	}
	if err := s.Put(context.Background(), Entry{List: Deny, Target: "203.0.113.1"}); !errors.Is(err, ErrNoList) {
		t.Errorf("Put to a list without a file: %v, want ErrNoList", err)
	}
}

// TestTableBadItem: an item no writer would write (a CIDR with host bits,
// put by hand) fails the read naming it, and the watcher keeps its last
// good list.
func TestTableBadItem(t *testing.T) {
	s := newTableStore(t, func() time.Time { return t0 }).(*TableStore)
	ctx := context.Background()
	if err := s.Put(ctx, Entry{List: Deny, Target: "203.0.113.7"}); err != nil {
		t.Fatal(err)
	}
	var rep reports
	w, err := WatchSource(s, WatchOptions{List: Deny, Report: rep.report, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	it := key(Deny, "10.0.0.1/8")
	if _, err := s.calls.Put(ctx, &dynamodb.PutItemInput{Item: it}); err != nil {
		t.Fatal(err)
	}
	err = w.Reload()
	if err == nil || !strings.Contains(err.Error(), `item "10.0.0.1/8": entry: host bits set`) {
		t.Errorf("Reload: %v, want the bad item named", err)
	}
	if !w.List().ContainsAt(addrA, "", t0) {
		t.Error("the last good list was dropped")
	}
}

// TestTableOtherSpellings: items put by hand under another spelling of a
// target (upper case, zeros written out, spaces), which Entries and the
// edge read as the target, are removed and approved through the target,
// also when an item of the target itself is there too (two Removes, as
// `lists remove` makes for the two entries Entries returns).
func TestTableOtherSpellings(t *testing.T) {
	s := newTableStore(t, func() time.Time { return t0 }).(*TableStore)
	ctx := context.Background()
	hand := func(list, k string, pending bool) {
		t.Helper()
		it := key(list, k)
		if pending {
			it[TablePendingAttribute] = &types.AttributeValueMemberBOOL{Value: true}
		}
		if _, err := s.calls.Put(ctx, &dynamodb.PutItemInput{Item: it}); err != nil {
			t.Fatal(err)
		}
	}
	listed := func(list string, a netip.Addr) bool {
		t.Helper()
		es, err := s.Entries(ctx, list)
		if err != nil {
			t.Fatal(err)
		}
		return New(es, t0).ContainsAt(a, "", t0)
	}
	a7, a8, a9 := netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("2001:db8::8"), netip.MustParseAddr("2001:db8::9")
	hand(Deny, "2001:DB8::7", false)
	hand(Deny, " 2001:0db8:0:0::9", false)
	if err := s.Put(ctx, Entry{List: Deny, Target: "2001:db8::9"}); err != nil {
		t.Fatal(err)
	}
	hand(Challenge, "2001:0DB8::8", true)
	if !listed(Deny, a7) || !listed(Deny, a9) {
		t.Fatal("the edge does not read the items put by hand")
	}

	if err := s.Remove(ctx, Deny, "2001:db8::7", "ops", ""); err != nil {
		t.Fatalf("Remove of an item put by hand: %v", err)
	}
	if listed(Deny, a7) {
		t.Error("2001:db8::7 is still listed after its removal")
	}
	if err := s.Remove(ctx, Deny, "2001:db8::7", "ops", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Remove: %v, want ErrNotFound", err)
	}
	for i := range 2 {
		if err := s.Remove(ctx, Deny, "2001:db8::9", "ops", ""); err != nil {
			t.Fatalf("Remove %d of 2001:db8::9: %v", i+1, err)
		}
	}
	if listed(Deny, a9) {
		t.Error("2001:db8::9 is still listed after both its entries were removed")
	}

	if listed(Challenge, a8) {
		t.Fatal("a pending entry applies")
	}
	if err := s.Approve(ctx, Challenge, "2001:db8::8", "ops"); err != nil {
		t.Fatalf("Approve of an item put by hand: %v", err)
	}
	if !listed(Challenge, a8) {
		t.Error("2001:db8::8 does not apply once approved")
	}
	if err := s.Approve(ctx, Challenge, "2001:db8::8", "ops"); !errors.Is(err, ErrNotPending) {
		t.Errorf("second Approve: %v, want ErrNotPending", err)
	}
}

// TestWatchStateFile: changes made while no watcher runs are recorded when
// the next one starts, once.
func TestWatchStateFile(t *testing.T) {
	ctx := context.Background()
	clk := newClock(t0)
	s := newFileStore(t, clk.now)
	state := filepath.Join(t.TempDir(), "lists", "challenge.recorded")
	start := func() (*Watcher, *recorder) {
		var rec recorder
		w, err := WatchSource(s, WatchOptions{List: Challenge, Record: &rec, StateFile: state, Now: clk.now})
		if err != nil {
			t.Fatal(err)
		}
		return w, &rec
	}
	if err := s.Put(ctx, Entry{List: Challenge, Target: "203.0.113.7", By: "alice"}); err != nil {
		t.Fatal(err)
	}
	w, rec := start() // the first start has nothing to compare with
	if got := rec.take(); len(got) != 0 {
		t.Errorf("first start recorded %v", got)
	}
	w.Close(ctx)
	rec.take() // Close reads once more: nothing changed
	if err := s.Remove(ctx, Challenge, "203.0.113.7", "bob", ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, Entry{List: Challenge, Target: "user:eve", By: "carol", Expires: t1}); err != nil {
		t.Fatal(err)
	}
	w, rec = start()
	want := "challenge remove 203.0.113.7 by=bob ttl=0s reason=\"\"\nchallenge add user:eve by=carol ttl=1h0m0s reason=\"\""
	if got := strings.Join(rec.take(), "\n"); got != want {
		t.Errorf("changes while stopped:\n%s\nwant\n%s", got, want)
	}
	w.Close(ctx)
	w, rec = start()
	if got := rec.take(); len(got) != 0 {
		t.Errorf("a restart without changes recorded %v", got)
	}
	w.Close(ctx)
	if b, _ := os.ReadFile(state); string(b) != "user:eve expires=2026-12-01T18:00:00Z added=2026-12-01T17:00:00Z by=carol\n" {
		t.Errorf("state file:\n%s", b)
	}
}

// TestClockSkew: expiry is an instant, judged by the reader's clock. An
// entry from a writer whose clock runs ahead applies until its expiry by
// the reader's clock, and its feedback event's TTL is what is left by that
// clock; one from a writer so far behind that the entry is already
// expired for the reader never applies and is not recorded.
func TestClockSkew(t *testing.T) {
	ctx := context.Background()
	reader := newClock(t0)
	ahead, behind := newClock(t0.Add(time.Hour)), newClock(t0.Add(-time.Hour))
	s := newFileStore(t, reader.now).(*fileStore)
	paths := s.paths
	var rec recorder
	w, err := WatchSource(s, WatchOptions{List: Challenge, Record: &rec, Now: reader.now})
	if err != nil {
		t.Fatal(err)
	}
	if err := NewFileStore(paths, ahead.now).Put(ctx, Entry{List: Challenge, Target: "203.0.113.7", By: "ahead", Expires: ahead.now().Add(30 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := NewFileStore(paths, behind.now).Put(ctx, Entry{List: Challenge, Target: "203.0.113.8", By: "behind", Expires: behind.now().Add(30 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rec.take(), "\n"); got != `challenge add 203.0.113.7 by=ahead ttl=1h30m0s reason=""` {
		t.Errorf("events: %s", got)
	}
	l := w.List()
	if !l.ContainsAt(addrA, "", t0.Add(89*time.Minute)) || l.ContainsAt(addrA, "", t0.Add(90*time.Minute)) {
		t.Error("the entry from ahead does not expire at its instant by the reader's clock")
	}
	if l.ContainsAt(netip.MustParseAddr("203.0.113.8"), "", t0) {
		t.Error("an entry already expired by the reader's clock applies")
	}
}

// refusing is a Recorder whose queue is full until it is told otherwise.
type refusing struct {
	recorder
	full atomic.Bool
}

func (r *refusing) Emit(d decisions.Decision) bool {
	if r.full.Load() {
		return false
	}
	return r.recorder.Emit(d)
}

// TestWatchRetriesDropped: a change whose event the recorder dropped is
// recorded at the next read, once.
func TestWatchRetriesDropped(t *testing.T) {
	ctx := context.Background()
	s := newFileStore(t, func() time.Time { return t0 })
	var rec refusing
	w, err := WatchSource(s, WatchOptions{List: Challenge, Record: &rec, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	rec.full.Store(true)
	if err := s.Put(ctx, Entry{List: Challenge, Target: "203.0.113.7", By: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	rec.full.Store(false)
	for range 2 {
		// As a refresh does: the file has not changed since the last read.
		if err := w.load(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	if got := rec.take(); len(got) != 1 {
		t.Errorf("events %v, want the one add", got)
	}
	if n, d := w.Changes(); n != 1 || d != 1 {
		t.Errorf("Changes = %d, %d; want 1 recorded, 1 dropped", n, d)
	}
}

// TestFileStoreWaitsForTheLock: a writer waits while another holds the
// lock, and gives up, writing nothing, when its context ends.
func TestFileStoreWaitsForTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deny.list")
	held := flock.New(path + ".lock")
	if err := held.Lock(); err != nil {
		t.Fatal(err)
	}
	s := NewFileStore(map[string]string{Deny: path}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Put(ctx, Entry{List: Deny, Target: "203.0.113.7"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Put while locked: %v, want the context's deadline", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the list was written without the lock: %v", err)
	}
	held.Unlock()
	if err := s.Put(context.Background(), Entry{List: Deny, Target: "203.0.113.7"}); err != nil {
		t.Errorf("Put after the lock was released: %v", err)
	}
}

// TestTableThrottled: a TableStore rides out throttling as the
// aggregator's tables do (ddbtable.Calls): each of its calls, throttled
// twice by a proxy in front of dynalite with the SDK's own retries off, is
// tried again after a backoff and succeeds; the proxy sees every attempt.
func TestTableThrottled(t *testing.T) {
	name := fmt.Sprintf("lists-throttled-%d-%d", os.Getpid(), tableSeq.Add(1))
	ep := awstest.Endpoint(t, awstest.DynamoDBEnv)
	awstest.CreateTable(t, dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(ep) }), TableSpec(name))
	th := awstest.ThrottleDynamoDB(t, 2, "PutItem", "UpdateItem", "Query")
	db := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) { o.BaseEndpoint, o.RetryMaxAttempts = &th.URL, 1 })
	s := NewTableStore(db, name, func() time.Time { return t0 })
	ctx := t.Context()
	if err := s.Put(ctx, Entry{List: Challenge, Target: "203.0.113.7", Pending: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Approve(ctx, Challenge, "203.0.113.7", "oncall"); err != nil {
		t.Fatal(err)
	}
	es, err := s.Entries(ctx, Challenge)
	if err != nil || len(es) != 1 || es[0].Pending || es[0].By != "oncall" {
		t.Fatalf("entries %+v, %v; want the approved entry", es, err)
	}
	for _, op := range []string{"PutItem", "UpdateItem", "Query"} {
		if n := th.Calls(op); n != 3 {
			t.Errorf("%s: %d calls, want 3 (two throttled, then the one that went through)", op, n)
		}
	}
}

// TestSingleAddressPrefix: an address written with its full length
// (90.0.0.1/32, 2001:db8::1/128), which earlier writers stored under that
// key, is the address: read as it, replaced by a Put of it (or of the other
// spelling), and removed through it. Before, the two spellings were two
// entries of one client, so that an add --ttl over a permanent entry
// left it applying, and a remove of the address left the /32.
func TestSingleAddressPrefix(t *testing.T) {
	stored := map[string]func(*testing.T, store, string){ // puts an entry as earlier writers stored it
		"file": func(t *testing.T, s store, k string) {
			path := s.(*fileStore).paths[Deny]
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteString(k + " by=old\n"); err != nil {
				t.Fatal(err)
			}
		},
		"table": func(t *testing.T, s store, k string) {
			it := key(Deny, k)
			it[TableByAttribute] = str("old")
			if _, err := s.(*TableStore).calls.Put(context.Background(), &dynamodb.PutItemInput{Item: it}); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, open := range map[string]func(*testing.T, func() time.Time) store{"file": newFileStore, "table": newTableStore} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t, func() time.Time { return t0 })
			entries := func() string {
				t.Helper()
				es, err := s.Entries(ctx, Deny)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, e := range es {
					out = append(out, e.Target+" "+e.State(t0)+" by="+e.By)
				}
				slices.Sort(out)
				return strings.Join(out, ", ")
			}
			denied := func(addr string) bool {
				t.Helper()
				es, err := s.Entries(ctx, Deny)
				if err != nil {
					t.Fatal(err)
				}
				return New(es, t0).ContainsAt(netip.MustParseAddr(addr), "", t0.Add(2*time.Hour))
			}
			stored[name](t, s, "90.0.0.1/32")
			stored[name](t, s, "2001:db8::1/128")
			if !denied("90.0.0.1") || !denied("2001:db8::1") {
				t.Fatalf("the entries stored with their full length do not apply: %s", entries())
			}
			if err := s.Put(ctx, Entry{List: Deny, Target: "90.0.0.1", By: "bob", Expires: t0.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if err := s.Put(ctx, Entry{List: Deny, Target: "90.0.0.2", By: "bob"}); err != nil {
				t.Fatal(err)
			}
			if err := s.Put(ctx, Entry{List: Deny, Target: "::ffff:90.0.0.2/128", By: "carol", Expires: t0.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if err := s.Remove(ctx, Deny, "2001:db8::1", "bob", ""); err != nil {
				t.Fatalf("Remove of the address of a /128: %v", err)
			}
			if got, want := entries(), "2001:db8::1 removed by=bob, 90.0.0.1 active by=bob, 90.0.0.2 active by=carol"; got != want {
				t.Errorf("entries %s, want %s", got, want)
			}
			for _, a := range []string{"90.0.0.1", "90.0.0.2", "2001:db8::1"} {
				if denied(a) {
					t.Errorf("%s is still denied after the entry that replaced it expired, or after its removal", a)
				}
			}
		})
	}
}

// TestFileStoreRemovesEveryLine: a hand-edited file with several lines of
// one target is read as the longest-lived of them, and Remove removes them
// all when any applies or waits for approval, whichever line it is: before,
// it looked at the last line alone, said no such entry when that one had
// expired, and the edge went on applying the other.
func TestFileStoreRemovesEveryLine(t *testing.T) {
	past, later := t0.Add(-time.Hour).Format(time.RFC3339), t1.Format(time.RFC3339)
	f := func(file string, removed bool) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "deny.list")
		if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		s := NewFileStore(map[string]string{Deny: path}, func() time.Time { return t0 })
		err := s.Remove(context.Background(), Deny, "50.0.0.1", "bob", "")
		got, _ := os.ReadFile(path)
		want := file
		if removed {
			want = "# hand-edited\n50.0.0.1 by=bob removed=2026-12-01T17:00:00Z\n"
		}
		if (err == nil) != removed || string(got) != want {
			t.Errorf("Remove of\n%s: %v; the file holds\n%s\nwant\n%s", file, err, got, want)
		}
	}
	f("# hand-edited\n50.0.0.1\n50.0.0.1 expires="+past+"\n", true)
	f("# hand-edited\n50.0.0.1 expires="+past+"\n50.0.0.1 expires="+later+"\n", true)
	f("# hand-edited\n50.0.0.1 pending=true\n50.0.0.1 removed="+past+"\n", true)
	f("# hand-edited\n50.0.0.1 removed="+past+"\n50.0.0.1 expires="+past+"\n", false)
}

// TestFileStoreWritesThroughSymlink: a list file that is a symbolic link
// stays one after a write, and the file it leads to holds the entry, as
// the edge reads it through the link: before, `lists add` replaced the
// link with a regular file.
func TestFileStoreWritesThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "checkout.list"), filepath.Join(dir, "deny.list")
	if err := os.WriteFile(target, []byte("# kept in a checkout\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("checkout.list", link); err != nil {
		t.Fatal(err)
	}
	s := NewFileStore(map[string]string{Deny: link}, func() time.Time { return t0 })
	if err := s.Put(context.Background(), Entry{List: Deny, Target: "203.0.113.7", By: "alice"}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("%s is no longer a symbolic link: %v, %v", link, fi.Mode(), err)
	}
	got, _ := os.ReadFile(target)
	if want := "# kept in a checkout\n203.0.113.7 added=2026-12-01T17:00:00Z by=alice\n"; string(got) != want {
		t.Errorf("the file the link leads to holds\n%s\nwant\n%s", got, want)
	}
}

// TestFileStoreDropsLongExpired: a write drops the entries that expired
// more than TombstoneAge ago, as it drops old tombstones (DynamoDB's time
// to live deletes them from a table): a list file the policies write
// every hour does not keep every target they ever listed. One that
// expired within TombstoneAge, and a comment, stay.
func TestFileStoreDropsLongExpired(t *testing.T) {
	path := filepath.Join(t.TempDir(), "challenge.list")
	at := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339) }
	orig := "# scrapers\n203.0.113.1 expires=" + at(-30*24*time.Hour) + " by=policy:p\n" +
		"203.0.113.2 expires=" + at(-time.Hour) + " by=policy:p\n"
	if err := os.WriteFile(path, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewFileStore(map[string]string{Challenge: path}, func() time.Time { return t0 })
	if err := s.Put(context.Background(), Entry{List: Challenge, Target: "203.0.113.3", Expires: t0.Add(time.Hour), By: "policy:p"}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := "# scrapers\n203.0.113.2 expires=" + at(-time.Hour) + " by=policy:p\n" +
		"203.0.113.3 expires=" + at(time.Hour) + " added=" + at(0) + " by=policy:p\n"
	if string(got) != want {
		t.Errorf("file after Put:\n%s\nwant\n%s", got, want)
	}
}
