package assemble_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/edge/lists"
)

var challengeKeys = "k1:" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

var listTables atomic.Int64

// unlimited are tiers that refuse nothing the lists do not.
const unlimited = "tiers: {anonymous: {global: {limit: 1000000000, window: 1m}}}\n"

// listsConfig returns the YAML of an edge whose lists are in a store of
// kind file or table (a new table on dynalite), refreshed every refresh,
// with the decision log in logDir.
func listsConfig(tb testing.TB, kind, logDir string, refresh time.Duration) string {
	tb.Helper()
	src := ""
	switch kind {
	case "file":
		dir := tb.TempDir()
		for _, n := range lists.Names {
			p := filepath.Join(dir, n+".list")
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				tb.Fatal(err)
			}
			src += "  " + n + "_file: " + p + "\n"
		}
	case "table":
		ep := awstest.Endpoint(tb, awstest.DynamoDBEnv)
		db := dynamodb.NewFromConfig(awstest.Config(tb), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(ep) })
		name := fmt.Sprintf("lists-assemble-%d-%d", os.Getpid(), listTables.Add(1))
		awstest.CreateTable(tb, db, lists.TableSpec(name))
		tb.Setenv("AWS_ACCESS_KEY_ID", "test")
		tb.Setenv("AWS_SECRET_ACCESS_KEY", "test")
		src = "  table: " + name + "\n"
		src = "store: {dynamodb: {region: us-east-1, endpoint: " + ep + "}}\nlists:\n" + src
		return "edge: {upstream: ORIGIN}\nchallenge: {enabled: true}\ndecisions: {dir: " + logDir + "}\n" + src + "  refresh: " + refresh.String() + "\n" + unlimited
	}
	return "edge: {upstream: ORIGIN}\nchallenge: {enabled: true}\ndecisions: {dir: " + logDir + "}\nlists:\n" + src + "  refresh: " + refresh.String() + "\n" + unlimited
}

// listsEdge assembles the edge of listsConfig and opens its lists store as
// `ratewarden lists` does.
func listsEdge(tb testing.TB, kind, logDir string, refresh time.Duration, edits ...func(*config.Config)) (*assemble.Edge, assemble.ListStore) {
	tb.Helper()
	return listsEdgeAt(tb, kind, logDir, refresh, nil, edits...)
}

// listsEdgeAt is listsEdge with the edge on clock (nil: the wall clock).
func listsEdgeAt(tb testing.TB, kind, logDir string, refresh time.Duration, clock func() time.Time, edits ...func(*config.Config)) (*assemble.Edge, assemble.ListStore) {
	tb.Helper()
	e, store, _ := listsEdgeConfig(tb, kind, logDir, refresh, clock, edits...)
	return e, store
}

// listsEdgeConfig is listsEdgeAt that returns the configuration too, for
// `ratewarden lists` (assemble.ListsAction) to run on.
func listsEdgeConfig(tb testing.TB, kind, logDir string, refresh time.Duration, clock func() time.Time, edits ...func(*config.Config)) (*assemble.Edge, assemble.ListStore, *config.Config) {
	tb.Helper()
	cfg := loadConfig(tb, listsConfig(tb, kind, logDir, refresh))
	for _, edit := range edits {
		edit(cfg)
	}
	getenv := func(k string) string {
		if k == cfg.Challenge.KeysEnv {
			return challengeKeys
		}
		return ""
	}
	e, err := assemble.NewEdge(context.Background(), cfg, assemble.Options{Getenv: getenv, Clock: clock})
	if err != nil {
		tb.Fatal(err)
	}
	store, _, _, err := assemble.OpenLists(context.Background(), cfg, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return e, store, cfg
}

func statusOf(h http.Handler, addr string) int {
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.RemoteAddr = addr
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// TestEdgeObeysListStores writes the challenge list through each store
// while an assembled edge reads it: a listed client is challenged on its
// next request (its first, whatever its count), and allowed once removed;
// each change is one feedback event in the decision log, which the
// aggregator counts.
func TestEdgeObeysListStores(t *testing.T) {
	for _, kind := range []string{"file", "table"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			logDir := filepath.Join(t.TempDir(), "log")
			e, store := listsEdge(t, kind, logDir, time.Hour)
			h := e.Handler()
			reload := func() {
				t.Helper()
				if err := e.Lists[lists.Challenge].Reload(); err != nil {
					t.Fatal(err)
				}
			}
			const client = "203.0.113.7:1000"
			var got []int
			if err := store.Put(ctx, lists.Entry{List: lists.Challenge, Target: "203.0.113.7", By: "alice", Reason: "scraper"}); err != nil {
				t.Fatal(err)
			}
			reload()
			got = append(got, statusOf(h, client), statusOf(h, "203.0.113.8:1000"))
			if err := store.Remove(ctx, lists.Challenge, "203.0.113.7", "bob", "resolved"); err != nil {
				t.Fatal(err)
			}
			reload()
			reload() // no change: no event
			got = append(got, statusOf(h, client))
			if err := e.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != "[302 200 200]" {
				t.Errorf("statuses %v, want [302 200 200]", got)
			}
			var events []string
			var counts aggregator.Counts
			for _, d := range logEvents(t, logDir) {
				counts.Update(&d)
				if d.Kind == decisions.KindFeedback {
					events = append(events, d.Action+" "+d.List+" "+d.Target+" "+d.Node+" "+d.Reason)
				}
			}
			if want := "add challenge 203.0.113.7 alice scraper\nremove challenge 203.0.113.7 bob resolved"; strings.Join(events, "\n") != want {
				t.Errorf("feedback events:\n%s\nwant\n%s", strings.Join(events, "\n"), want)
			}
			if fmt.Sprint(counts.Feedback) != "map[challenge/add:1 challenge/remove:1]" {
				t.Errorf("Counts.Feedback = %v", counts.Feedback)
			}
		})
	}
}

// BenchmarkListPropagation measures the time from a write to a list
// store returning to the first request the assembled edge decides by it,
// with lists.refresh 1s: each iteration adds or removes a challenge-list
// entry at a random phase of the refresh, then sends a request every 5ms
// until the outcome flips. It reports the mean and the largest delay (ns/op
// includes the random wait and means nothing).
func BenchmarkListPropagation(b *testing.B) {
	for _, kind := range []string{"file", "table"} {
		b.Run(kind, func(b *testing.B) {
			ctx := context.Background()
			e, store := listsEdge(b, kind, filepath.Join(b.TempDir(), "log"), time.Second)
			defer e.Close(ctx)
			h := e.Handler()
			var delays []time.Duration
			listed := false
			// Writes land at a pseudo-random phase of the refresh ticker, as
			// real ones do; the wait before each is not measured.
			phase := rand.New(rand.NewPCG(1, 2))
			for b.Loop() {
				time.Sleep(time.Duration(phase.Int64N(int64(time.Second))))
				var err error
				if listed {
					err = store.Remove(ctx, lists.Challenge, "203.0.113.7", "bench", "")
				} else {
					err = store.Put(ctx, lists.Entry{List: lists.Challenge, Target: "203.0.113.7", By: "bench"})
				}
				if err != nil {
					b.Fatal(err)
				}
				listed = !listed
				want := http.StatusOK
				if listed {
					want = http.StatusFound
				}
				start := time.Now()
				for statusOf(h, fmt.Sprintf("203.0.113.7:%d", len(delays))) != want {
					if time.Since(start) > 10*time.Second {
						b.Fatalf("no change after 10s")
					}
					time.Sleep(5 * time.Millisecond)
				}
				delays = append(delays, time.Since(start))
			}
			sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
			var sum time.Duration
			for _, d := range delays {
				sum += d
			}
			b.ReportMetric(float64(sum.Milliseconds())/float64(len(delays)), "ms-mean/op")
			b.ReportMetric(float64(delays[len(delays)-1].Milliseconds()), "ms-max/op")
		})
	}
}

// challengeListed puts target on the challenge list and has the edge read
// it now; it returns the list's watcher.
func challengeListed(t *testing.T, e *assemble.Edge, store assemble.ListStore, target string) *lists.Watcher {
	t.Helper()
	if err := store.Put(context.Background(), lists.Entry{List: lists.Challenge, Target: target, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	w := e.Lists[lists.Challenge]
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestEdgeListsOnItsClock: the feedback event of a list change is stamped
// on the edge's clock, as its decisions are (the demo's story time), not
// the wall clock: in one log, on another clock, it would be a late event
// of a window long closed.
func TestEdgeListsOnItsClock(t *testing.T) {
	ctx := context.Background()
	logDir := filepath.Join(t.TempDir(), "log")
	at := time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC)
	e, store := listsEdgeAt(t, "file", logDir, time.Hour, func() time.Time { return at })
	challengeListed(t, e, store, "203.0.113.7")
	statusOf(e.Handler(), "203.0.113.8:1")
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range logEvents(t, logDir) {
		got = append(got, d.Kind.String()+" "+d.Time.UTC().Format(time.RFC3339))
	}
	if want := "feedback 2031-05-01T12:00:00Z, decision 2031-05-01T12:00:00Z"; strings.Join(got, ", ") != want {
		t.Errorf("events %s, want %s", strings.Join(got, ", "), want)
	}
}

// TestEdgeListsRecordOff: with lists.record false the edge obeys the list
// and records nothing, for the edges of a fleet that leave it to one.
func TestEdgeListsRecordOff(t *testing.T) {
	ctx := context.Background()
	e, store := listsEdge(t, "file", filepath.Join(t.TempDir(), "log"), time.Hour, func(c *config.Config) { c.Lists.Record = new(false) })
	defer e.Close(ctx)
	w := challengeListed(t, e, store, "203.0.113.7")
	if s := statusOf(e.Handler(), "203.0.113.7:1"); s != http.StatusFound {
		t.Errorf("status %d, want 302", s)
	}
	if n, _ := w.Changes(); n != 0 {
		t.Errorf("%d changes recorded with lists.record false", n)
	}
}

// TestEdgeKeepsLastGoodList: a list file that turns bad (a second target
// smuggled onto a line, a NUL byte) is refused naming file:line, and the
// edge goes on obeying the last good list.
func TestEdgeKeepsLastGoodList(t *testing.T) {
	ctx := context.Background()
	e, store := listsEdge(t, "file", filepath.Join(t.TempDir(), "log"), time.Hour)
	defer e.Close(ctx)
	w := challengeListed(t, e, store, "203.0.113.7")
	path := w.Source().Name()
	for _, bad := range []string{"203.0.113.7\n198.51.100.7 203.0.113.8\n", "203.0.113.7\n198.51.100.7\x00\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := w.Reload(); err == nil || !strings.Contains(err.Error(), path+":2: ") {
			t.Errorf("Reload of %q: %v, want an error naming %s:2", bad, err, path)
		}
		if s := statusOf(e.Handler(), "203.0.113.7:1"); s != http.StatusFound {
			t.Errorf("after a bad file: %d, want 302 from the last good list", s)
		}
		if s := statusOf(e.Handler(), "198.51.100.7:1"); s != http.StatusOK {
			t.Errorf("a target of the bad file applies: %d", s)
		}
	}
}

// TestEdgeReadsListsThroughNAT64: an edge with identity.nat64_prefixes
// reads a list entry in one of them as the IPv4 client it carries, as it
// reads the client, and logs once an entry that holds one of them; the
// aggregator's allow list is read alike; `lists add` says so.
func TestEdgeReadsListsThroughNAT64(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	deny, allow := filepath.Join(dir, "deny.list"), filepath.Join(dir, "allow.list")
	for path, text := range map[string]string{deny: "2001:db8:64::cb00:7142\n2001:db8:64::/48\n", allow: "2001:db8:64::198.51.100.0/120\n"} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := loadConfig(t, "edge: {upstream: ORIGIN}\nidentity: {nat64_prefixes: [\"2001:db8:64::/96\"]}\n"+
		"lists: {deny_file: "+deny+", allow_file: "+allow+"}\n"+unlimited)
	var logged strings.Builder
	e, err := assemble.NewEdge(ctx, cfg, assemble.Options{Log: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	for addr, want := range map[string]int{
		"203.0.113.66:1":             http.StatusForbidden,
		"[2001:db8:64::cb00:7142]:1": http.StatusForbidden,
		"[::ffff:203.0.113.66]:1":    http.StatusForbidden,
		"[64:ff9b::203.0.113.66]:1":  http.StatusForbidden,
		"[2001:db8:64:1::1]:1":       http.StatusForbidden, // plain IPv6 in the /48
		"203.0.113.67:1":             http.StatusOK,
		"[2001:db8:64::cb00:7143]:1": http.StatusOK, // 203.0.113.67: the /48 holds no IPv4 client
		"[2001:db8:64::c633:6407]:1": http.StatusOK,
	} {
		if s := statusOf(e.Handler(), addr); s != want {
			t.Errorf("%s: %d, want %d", addr, s, want)
		}
	}
	if !e.Lists[lists.Allow].List().Contains(netip.MustParseAddr("198.51.100.7"), "") {
		t.Errorf("the allow list's 2001:db8:64::198.51.100.0/120 does not hold 198.51.100.7")
	}
	if err := e.Lists[lists.Deny].Reload(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logged.String(), "entry=2001:db8:64::/48"); n != 1 || !strings.Contains(logged.String(), "level=WARN") {
		t.Errorf("logged the /48 %d times, want once as a warning:\n%s", n, logged.String())
	}
	in, err := assemble.ReadInputs(cfg, func(string) string { return "" })
	if err != nil || len(in.Warnings) != 1 || !strings.Contains(in.Warnings[0], "lists.deny_file: "+deny+": 2001:db8:64::/48 holds identity.nat64_prefixes 2001:db8:64::/96 but not the IPv4 clients") {
		t.Errorf("ReadInputs: %q, %v; want a warning of the /48", in.Warnings, err)
	}

	var out strings.Builder
	for _, target := range []string{"2001:db8:64::203.0.113.9", "2001:db8:64::198.51.100.0/120", "2001:db8:64::/64", "203.0.113.10"} {
		a := assemble.ListsAction{Action: "add", List: lists.Deny, Target: target, By: "tester"}
		if err := a.Run(ctx, cfg, nil, &out); err != nil {
			t.Fatal(err)
		}
	}
	want := "deny: add 2001:db8:64::203.0.113.9\n" +
		"note: identity.nat64_prefixes: an edge with this configuration reads 2001:db8:64::cb00:7109 as the IPv4 client 203.0.113.9; one without the setting reads it as written\n" +
		"deny: add 2001:db8:64::198.51.100.0/120\n" +
		"note: identity.nat64_prefixes: an edge with this configuration reads 2001:db8:64::c633:6400/120 as the IPv4 clients 198.51.100.0/24; one without the setting reads it as written\n" +
		"deny: add 2001:db8:64::/64\n" +
		"note: 2001:db8:64::/64 holds identity.nat64_prefixes 2001:db8:64::/96 but not the IPv4 clients behind that translator, which the edge reads as their IPv4 addresses; list those by IPv4 address or prefix, or as 2001:db8:64::/96 (every IPv4 client)\n" +
		"deny: add 203.0.113.10\n"
	if out.String() != want {
		t.Errorf("lists add printed\n%s\nwant\n%s", out.String(), want)
	}
}

// TestListsAddOverActive: `lists add --pending` over an entry of the
// target that applies is refused, saying what is there and what to do,
// and the list and the edge are left as they were: before, the proposal
// replaced the entry, and the edge let the client through until someone
// approved it. A plain add over it still replaces it, and says what it
// replaced, so that an add --ttl that shortens a permanent entry shows.
func TestListsAddOverActive(t *testing.T) {
	at := time.Now().UTC().Truncate(time.Second)
	later := at.Add(time.Hour).Format(time.RFC3339)
	cases := []struct {
		name     string
		first    assemble.ListsAction // run before, by alice
		then     assemble.ListsAction // the add of the case, by bob
		out, err string
		left     []string // the list's entries after, with states
		denied   bool     // whether the edge refuses 110.0.0.1 after
	}{{
		name:  "a proposal over an entry that applies",
		first: assemble.ListsAction{Reason: "x"}, then: assemble.ListsAction{Pending: true, Reason: "proposal"},
		err:  "add 110.0.0.1 to deny as pending: the entry 110.0.0.1 applies (until removed, by alice, reason \"x\"), and a proposal would replace it, so that it would not apply until approved; add without --pending to change it, or remove it first (lists remove) to propose another",
		left: []string{"110.0.0.1 active"}, denied: true,
	}, {
		name:  "a proposal over a proposal",
		first: assemble.ListsAction{Pending: true}, then: assemble.ListsAction{Pending: true, Reason: "proposal"},
		out:  "deny: add 110.0.0.1\n",
		left: []string{"110.0.0.1 pending"},
	}, {
		name:  "an entry with a TTL over a permanent one",
		first: assemble.ListsAction{Reason: "x"}, then: assemble.ListsAction{TTL: time.Hour},
		out:  "deny: add 110.0.0.1\nnote: replaced the entry 110.0.0.1 that applied (until removed, by alice, reason \"x\")\n",
		left: []string{"110.0.0.1 active"}, denied: true,
	}, {
		name:  "a permanent entry over one with a TTL",
		first: assemble.ListsAction{TTL: time.Hour}, then: assemble.ListsAction{},
		out:  "deny: add 110.0.0.1\nnote: replaced the entry 110.0.0.1 that applied (until " + later + ", by alice)\n",
		left: []string{"110.0.0.1 active"}, denied: true,
	}}
	for _, kind := range []string{"file", "table"} {
		for _, c := range cases {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				ctx := context.Background()
				e, store, cfg := listsEdgeConfig(t, kind, filepath.Join(t.TempDir(), "log"), time.Hour, nil)
				defer e.Close(ctx)
				now := func() time.Time { return at }
				run := func(a assemble.ListsAction, by string, w *strings.Builder) error {
					a.Action, a.List, a.Target, a.By = "add", lists.Deny, "110.0.0.1", by
					return a.Run(ctx, cfg, now, w)
				}
				if err := run(c.first, "alice", &strings.Builder{}); err != nil {
					t.Fatal(err)
				}
				var out strings.Builder
				err := run(c.then, "bob", &out)
				if errText(err) != c.err || out.String() != c.out {
					t.Errorf("lists add: printed %q, error %q; want %q, error %q", out.String(), errText(err), c.out, c.err)
				}
				if got := listStates(t, store, lists.Deny); !slices.Equal(got, c.left) {
					t.Errorf("after lists add the list holds %q, want %q", got, c.left)
				}
				if got := denied(t, e, "110.0.0.1:1"); got != c.denied {
					t.Errorf("after lists add the edge refuses 110.0.0.1: %v, want %v", got, c.denied)
				}
			})
		}
	}
}

// TestListsRemoveHandEditedLines: `lists remove` of a client whose deny
// file, edited by hand, holds two lines of it (one that applies and one
// that expired, or two that apply) removes it, says so once, and the edge
// lets it through: before, when the last line had expired, it said no
// such entry and exited 1 while the edge refused the client.
func TestListsRemoveHandEditedLines(t *testing.T) {
	ctx := context.Background()
	e, store, cfg := listsEdgeConfig(t, "file", filepath.Join(t.TempDir(), "log"), time.Hour, nil)
	defer e.Close(ctx)
	expired, later := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, file := range []string{"50.0.0.1\n50.0.0.1 expires=" + expired + "\n", "50.0.0.1 expires=" + expired + "\n50.0.0.1\n", "50.0.0.1\n50.0.0.1 expires=" + later + "\n"} {
		if err := os.WriteFile(cfg.Lists.DenyFile, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		if !denied(t, e, "50.0.0.1:1") {
			t.Fatalf("the edge does not refuse 50.0.0.1 with\n%s", file)
		}
		var out strings.Builder
		err := assemble.ListsAction{Action: "remove", List: lists.Deny, Target: "50.0.0.1", By: "bob"}.Run(ctx, cfg, nil, &out)
		if err != nil || out.String() != "deny: remove 50.0.0.1\n" {
			t.Errorf("lists remove of\n%s: printed %q, error %v; want %q", file, out.String(), err, "deny: remove 50.0.0.1\n")
		}
		if got := listStates(t, store, lists.Deny); !slices.Equal(got, []string{"50.0.0.1 removed"}) {
			t.Errorf("after lists remove the list holds %q, want one tombstone", got)
		}
		if denied(t, e, "50.0.0.1:1") {
			t.Error("the edge refuses 50.0.0.1 after lists remove")
		}
	}
}

// TestListsRemoveReason: `lists remove --reason` is recorded as why the
// entry was removed, on its tombstone and in the feedback event, and a
// remove without one records none: before, the reason given was dropped
// and both carried the add's ("bob removed it: scraper"). --pending, which
// only an add can be, is refused with remove as --ttl is.
func TestListsRemoveReason(t *testing.T) {
	for _, kind := range []string{"file", "table"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			logDir := filepath.Join(t.TempDir(), "log")
			e, store, cfg := listsEdgeConfig(t, kind, logDir, time.Hour, nil)
			run := func(a assemble.ListsAction) error {
				a.List = lists.Deny
				return a.Run(ctx, cfg, nil, io.Discard)
			}
			for _, a := range []assemble.ListsAction{
				{Action: "add", Target: "203.0.113.7", By: "alice", Reason: "scraper"},
				{Action: "add", Target: "203.0.113.8", By: "alice", Reason: "scraper"},
				{Action: "remove", Target: "203.0.113.7", By: "bob", Reason: "a false positive"},
				{Action: "remove", Target: "203.0.113.8", By: "bob"},
			} {
				if err := run(a); err != nil {
					t.Fatal(err)
				}
				if err := e.Lists[lists.Deny].Reload(); err != nil {
					t.Fatal(err)
				}
			}
			err := run(assemble.ListsAction{Action: "remove", Target: "203.0.113.9", By: "bob", Pending: true})
			if want := "--pending: with add only (lists remove takes effect at once)"; errText(err) != want {
				t.Errorf("lists remove --pending: %v, want %s", err, want)
			}
			es, err := store.Entries(ctx, lists.Deny)
			if err != nil {
				t.Fatal(err)
			}
			var tombs []string
			for _, x := range es {
				tombs = append(tombs, fmt.Sprintf("%s %s by=%s reason=%q", x.Target, x.State(time.Now()), x.By, x.Reason))
			}
			sort.Strings(tombs)
			if want := "203.0.113.7 removed by=bob reason=\"a false positive\"\n203.0.113.8 removed by=bob reason=\"\""; strings.Join(tombs, "\n") != want {
				t.Errorf("entries\n%s\nwant\n%s", strings.Join(tombs, "\n"), want)
			}
			if err := e.Close(ctx); err != nil {
				t.Fatal(err)
			}
			var events []string
			for _, d := range logEvents(t, logDir) {
				if d.Kind == decisions.KindFeedback && d.Action == "remove" {
					events = append(events, fmt.Sprintf("%s %s by=%s reason=%q", d.Action, d.Target, d.Node, d.Reason))
				}
			}
			if want := "remove 203.0.113.7 by=bob reason=\"a false positive\"\nremove 203.0.113.8 by=bob reason=\"\""; strings.Join(events, "\n") != want {
				t.Errorf("feedback events\n%s\nwant\n%s", strings.Join(events, "\n"), want)
			}
		})
	}
}

// TestListsMissingFile: with a list's file gone (moved, deleted) while an
// edge still applies what it read last, lists show and add refuse, naming
// the file, and add does not create it: show printed an empty list, and
// add wrote a file of its one entry, which the edge then read, lifting
// every entry it applied.
func TestListsMissingFile(t *testing.T) {
	ctx := context.Background()
	e, _, cfg := listsEdgeConfig(t, "file", filepath.Join(t.TempDir(), "log"), time.Hour, nil)
	defer e.Close(ctx)
	if err := os.WriteFile(cfg.Lists.DenyFile, []byte("5.6.7.9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !denied(t, e, "5.6.7.9:1") {
		t.Fatal("the edge does not refuse 5.6.7.9")
	}
	if err := os.Remove(cfg.Lists.DenyFile); err != nil {
		t.Fatal(err)
	}
	for _, a := range []assemble.ListsAction{
		{Action: "show"},
		{Action: "show", List: lists.Deny},
		{Action: "add", List: lists.Deny, Target: "1.1.1.1", By: "bob"},
	} {
		var out strings.Builder
		err := a.Run(ctx, cfg, nil, &out)
		if err == nil || !strings.Contains(err.Error(), "lists.deny_file "+cfg.Lists.DenyFile+" does not exist") {
			t.Errorf("lists %s --list %q: printed %q, error %v; want the missing file named", a.Action, a.List, out.String(), err)
		}
	}
	if _, err := os.Stat(cfg.Lists.DenyFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lists add made the missing file (%v)", err)
	}
	if err := e.Lists[lists.Deny].Reload(); err == nil {
		t.Error("the edge read a deny list")
	}
	if statusOf(e.Handler(), "5.6.7.9:1") != http.StatusForbidden {
		t.Error("the edge no longer refuses 5.6.7.9")
	}
}

// TestListsAddEveryone: an add of a prefix holding every address of its
// family (0.0.0.0/0, ::/0, and ::ffff:0:0/96, which is read as 0.0.0.0/0)
// is refused unless Everyone consents, and the list and the edge are left
// as they were; with the consent the edge applies it; a prefix one bit
// longer is added without it.
func TestListsAddEveryone(t *testing.T) {
	for _, kind := range []string{"file", "table"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			e, store, cfg := listsEdgeConfig(t, kind, filepath.Join(t.TempDir(), "log"), time.Hour, nil)
			defer e.Close(ctx)
			add := func(list, target string, everyone bool) (string, error) {
				var out strings.Builder
				a := assemble.ListsAction{Action: "add", List: list, Target: target, By: "alice", Everyone: everyone}
				err := a.Run(ctx, cfg, nil, &out)
				return out.String(), err
			}
			for _, c := range []struct{ list, target, err string }{
				{lists.Deny, "0.0.0.0/0", "add 0.0.0.0/0 to deny: it holds every IPv4 client, and the edge would refuse every one of them; give --everyone to mean it"},
				{lists.Deny, "::ffff:0:0/96", "add ::ffff:0:0/96 to deny: it holds every IPv4 client, and the edge would refuse every one of them; give --everyone to mean it"},
				{lists.Deny, "::/0", "add ::/0 to deny: it holds every IPv6 client, and the edge would refuse every one of them; give --everyone to mean it"},
				{lists.Allow, "0.0.0.0/0", "add 0.0.0.0/0 to allow: it holds every IPv4 client, and every one of them would pass every limit; give --everyone to mean it"},
			} {
				if out, err := add(c.list, c.target, false); errText(err) != c.err || out != "" {
					t.Errorf("add %s to %s: printed %q, error %q; want error %q", c.target, c.list, out, errText(err), c.err)
				}
				if got := listStates(t, store, c.list); len(got) != 0 {
					t.Errorf("after a refused add of %s the %s list holds %q", c.target, c.list, got)
				}
			}
			if denied(t, e, "110.0.0.1:1") {
				t.Fatal("the edge refuses 110.0.0.1 after refused adds")
			}
			if _, err := add(lists.Deny, "0.0.0.0/1", false); err != nil {
				t.Fatalf("add 0.0.0.0/1: %v", err)
			}
			if _, err := add(lists.Deny, "0.0.0.0/0", true); err != nil {
				t.Fatalf("add 0.0.0.0/0 with consent: %v", err)
			}
			if !denied(t, e, "200.0.0.1:1") {
				t.Error("the edge does not refuse 200.0.0.1 after 0.0.0.0/0 was added with consent")
			}
		})
	}
}

// TestListsAddPartOfClient: an IPv6 address, or a prefix narrower than
// identity.ipv6_prefix, added to the deny or challenge list gets a note
// that it holds part of a client, which the edge counts by its prefix;
// a rotating scraper goes on from the other addresses. The whole prefix,
// wider ones, the allow list and IPv4 get none.
func TestListsAddPartOfClient(t *testing.T) {
	ctx := context.Background()
	e, _, cfg := listsEdgeConfig(t, "file", filepath.Join(t.TempDir(), "log"), time.Hour, nil)
	defer e.Close(ctx)
	for _, c := range []struct {
		bits         int
		list, target string
		note         string
	}{
		{64, lists.Deny, "2001:db8:1:2::5", "note: the edge counts an IPv6 client by its /64 (identity.ipv6_prefix): 2001:db8:1:2::5 is part of 2001:db8:1:2::/64, and a client there can go on from any other of its addresses; add 2001:db8:1:2::/64 to deny to hold the whole client\n"},
		{64, lists.Challenge, "2001:DB8:1:2:8000::/65", "note: the edge counts an IPv6 client by its /64 (identity.ipv6_prefix): 2001:db8:1:2:8000::/65 is part of 2001:db8:1:2::/64, and a client there can go on from any other of its addresses; add 2001:db8:1:2::/64 to challenge to hold the whole client\n"},
		{56, lists.Deny, "2001:db8:1:2::/64", "note: the edge counts an IPv6 client by its /56 (identity.ipv6_prefix): 2001:db8:1:2::/64 is part of 2001:db8:1::/56, and a client there can go on from any other of its addresses; add 2001:db8:1::/56 to deny to hold the whole client\n"},
		{64, lists.Deny, "2001:db8:1:3::/64", ""},
		{64, lists.Deny, "2001:db8:2::/48", ""},
		{64, lists.Allow, "2001:db8:1:4::5", ""},
		{64, lists.Deny, "198.51.100.7", ""},
		{64, lists.Deny, "::ffff:198.51.100.8", ""},
		{64, lists.Deny, "user:2001:db8::9", ""},
	} {
		cfg.Identity.IPv6Prefix = c.bits
		var out strings.Builder
		a := assemble.ListsAction{Action: "add", List: c.list, Target: c.target, By: "alice"}
		if err := a.Run(ctx, cfg, nil, &out); err != nil {
			t.Fatalf("add %s to %s: %v", c.target, c.list, err)
		}
		_, note, _ := strings.Cut(out.String(), "\n")
		if note != c.note {
			t.Errorf("add %s to %s (identity.ipv6_prefix %d): notes %q, want %q", c.target, c.list, c.bits, note, c.note)
		}
	}
}
