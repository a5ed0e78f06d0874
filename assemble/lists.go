package assemble

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge/lists"
	"github.com/ratewarden/ratewarden/internal/clientip"
	"github.com/ratewarden/ratewarden/internal/visible"
)

// ListStore is what `ratewarden lists` needs of a store of feedback lists:
// lists.FileStore and lists.TableStore, and the aggregator's feedback
// policies through their own Put and Remove.
type ListStore interface {
	Put(ctx context.Context, e lists.Entry) error
	Remove(ctx context.Context, list, target, by, reason string) error
	Approve(ctx context.Context, list, target, by string) error
	Entries(ctx context.Context, list string) ([]lists.Entry, error)
}

var (
	_ ListStore = (*lists.FileStore)(nil)
	_ ListStore = (*lists.TableStore)(nil)
)

// ListFiles returns the list files lists names, by list.
func ListFiles(l config.Lists) map[string]string {
	m := map[string]string{}
	for name, path := range map[string]string{lists.Allow: l.AllowFile, lists.Deny: l.DenyFile, lists.Challenge: l.ChallengeFile} {
		if path != "" {
			m[name] = path
		}
	}
	return m
}

// OpenLists returns the store of the lists cfg names: the DynamoDB table
// lists.table (with store.dynamodb's region and endpoint) or the files, and
// the names of the lists it holds. now reads the clock (default time.Now).
func OpenLists(ctx context.Context, cfg *config.Config, now func() time.Time) (store ListStore, names []string, src func(list string) lists.Source, err error) {
	if t := cfg.Lists.Table; t != "" {
		ts, err := openTable(ctx, cfg, t, now)
		if err != nil {
			return nil, nil, nil, err
		}
		return ts, lists.Names, func(string) lists.Source { return ts }, nil
	}
	fs := lists.NewFileStore(ListFiles(cfg.Lists), now)
	names = fs.Lists()
	if len(names) == 0 {
		return nil, nil, nil, errors.New("lists: no list configured; set lists.allow_file, lists.deny_file, lists.challenge_file or lists.table")
	}
	return fs, names, func(list string) lists.Source { return fs.Source(list) }, nil
}

func openTable(ctx context.Context, cfg *config.Config, table string, now func() time.Time) (*lists.TableStore, error) {
	d := cfg.Store.DynamoDB
	acfg, err := AWS(ctx, d.Region)
	if err != nil {
		return nil, fmt.Errorf("lists.table: %w", err)
	}
	client := dynamodb.NewFromConfig(acfg, func(o *dynamodb.Options) {
		if d.Endpoint != "" {
			o.BaseEndpoint = &d.Endpoint
		}
	})
	return lists.NewTableStore(client, table, now), nil
}

// watchLists starts a watcher for each list cfg names, refreshed every
// lists.refresh, recording the changes it sees through record (nil: not
// recorded), each stamped with now (nil: the wall clock), the clock of the
// edge's decisions. Entries are read through identity.nat64_prefixes, as
// client addresses are, and an entry that holds one of those prefixes
// (lists.WideEntry) is logged once. With a decision log, what was recorded
// is kept in decisions.dir/lists/<list>.recorded, so that changes made
// while the edge was stopped are recorded when it starts. A list that
// fails to load the first time fails the start; a failed refresh keeps the
// last good list and is logged.
func watchLists(ctx context.Context, cfg *config.Config, log *slog.Logger, record lists.Recorder, now func() time.Time) (map[string]*lists.Watcher, error) {
	out := map[string]*lists.Watcher{}
	if len(ListFiles(cfg.Lists)) == 0 && cfg.Lists.Table == "" {
		return out, nil
	}
	_, names, src, err := OpenLists(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	nat := cfg.Identity.NAT64()
	for _, name := range names {
		if name == lists.Challenge && !cfg.Challenge.Enabled {
			continue // a table's challenge list needs challenge tokens
		}
		state := ""
		if cfg.Decisions.Dir != "" {
			// What the log was told, beside the log: seglog ignores it.
			state = filepath.Join(cfg.Decisions.Dir, "lists", name+".recorded")
		}
		w, err := lists.WatchSource(src(name), lists.WatchOptions{List: name, Every: cfg.Lists.Refresh, Record: record, StateFile: state, Now: now,
			Report: func(err error) {
				log.Error("list refresh failed; keeping the last good list", "list", name, "err", err)
			},
			NAT64: nat,
			Wide: func(e lists.WideEntry) {
				log.Warn("list entry does not match the IPv4 clients behind a NAT64 translator", "list", name, "entry", e.Target, "warning", e.String())
			}})
		if err != nil {
			for _, o := range out {
				o.Close(context.Background())
			}
			return nil, fmt.Errorf("%s list: %w", name, err)
		}
		out[name] = w
	}
	return out, nil
}

// ListsAction is one `ratewarden lists` command: show, add, remove or
// approve.
type ListsAction struct {
	Action  string        // show, add, remove or approve
	List    string        // allow, deny or challenge; "" with show: every list
	Target  string        // an address, a CIDR prefix or user:<id>; not for show
	TTL     time.Duration // add: how long the entry applies; 0: until removed
	Reason  string        // add, remove: why
	By      string        // who
	Pending bool          // add: proposed, applies once approved
	// Everyone is add's consent to a prefix holding every address of
	// its family (0.0.0.0/0, ::/0): without it such an add is refused.
	Everyone bool
	JSON     bool // show: JSON instead of a table
}

// ListsActions are the actions of ListsAction.
var ListsActions = []string{"show", "add", "remove", "approve"}

// Check checks the action and its flags, before any configuration is read:
// an error names the flag and what it wants.
func (a ListsAction) Check() error {
	if !slices.Contains(ListsActions, a.Action) {
		return fmt.Errorf("lists %q: want one of %s", a.Action, strings.Join(ListsActions, ", "))
	}
	if a.List != "" && !slices.Contains(lists.Names, a.List) {
		return fmt.Errorf("--list %q: want one of %s", a.List, strings.Join(lists.Names, ", "))
	}
	if a.Action != "show" && (a.List == "" || a.Target == "") {
		return fmt.Errorf("lists %s: want --list (one of %s) and a target (an address, a CIDR prefix or user:<id>)", a.Action, strings.Join(lists.Names, ", "))
	}
	if a.Action != "show" && strings.TrimSpace(a.By) == "" {
		return fmt.Errorf("lists %s: --by is empty ($USER is not set); want who makes the change, for the audit trail", a.Action)
	}
	if a.TTL < 0 || (a.TTL != 0 && a.Action != "add") {
		return fmt.Errorf("--ttl %s: want a positive duration, with add only", a.TTL)
	}
	if a.Pending && a.Action != "add" {
		return fmt.Errorf("--pending: with add only (lists %s takes effect at once)", a.Action)
	}
	if a.Action != "show" {
		// The target first, then each flag alone, so that the error
		// names the flag it is about.
		for _, c := range []struct {
			flag string
			e    lists.Entry
		}{
			{"", lists.Entry{List: a.List, Target: a.Target}},
			{"--by: ", lists.Entry{List: a.List, Target: a.Target, By: a.By}},
			{"--reason: ", lists.Entry{List: a.List, Target: a.Target, Reason: a.Reason}},
		} {
			if err := c.e.Validate(); err != nil {
				return fmt.Errorf("%s%w", c.flag, err)
			}
		}
	}
	if a.Action == "add" {
		return everyone(a)
	}
	return nil
}

// Run does a on the lists cfg names, at now, printing to w what show shows
// and what the others did.
func (a ListsAction) Run(ctx context.Context, cfg *config.Config, now func() time.Time, w io.Writer) error {
	if now == nil {
		now = time.Now
	}
	if err := a.Check(); err != nil {
		return err
	}
	store, names, _, err := OpenLists(ctx, cfg, now)
	if err != nil {
		return err
	}
	if a.List != "" && !slices.Contains(names, a.List) {
		return fmt.Errorf("--list %s: not configured (lists.%s_file); configured: %s", a.List, a.List, strings.Join(names, ", "))
	}
	if err := listFilesThere(cfg.Lists, a.List); err != nil {
		return err
	}
	nat := cfg.Identity.NAT64()
	switch a.Action {
	case "show":
		var all []lists.Entry
		for _, n := range names {
			if a.List != "" && n != a.List {
				continue
			}
			es, err := store.Entries(ctx, n)
			if err != nil {
				return err
			}
			all = append(all, es...)
		}
		return lists.Show(w, all, now(), nat, a.JSON)
	case "remove":
		return a.remove(ctx, store, nat, now(), w)
	case "approve":
		return a.approve(ctx, store, nat, now(), w)
	}
	return a.add(ctx, store, nat, cfg.Identity.IPv6Prefix, now(), w)
}

// listFilesThere returns an error naming the file of list (of every list
// when list is "") that does not exist. The store reads a missing file as
// an empty list and a write creates it, but the edge does not start
// without it and a running one keeps the list it last read: show would
// print an empty list where the edge applies entries, and an add would
// write a file of one entry that lifts every other the edge applied.
func listFilesThere(l config.Lists, list string) error {
	files := ListFiles(l)
	for _, n := range lists.Names {
		p, ok := files[n]
		if !ok || list != "" && n != list {
			continue
		}
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("lists.%s_file %s does not exist: the edge does not start without it, and one running applies the list it read last; "+
				"restore it, or create it (an empty file is an empty list)", n, p)
		}
	}
	return nil
}

// add puts a's entry, says which entry that applied it replaced, and how
// an edge reading through nat reads it when that is not as written
// (nat64Note). A store's Put replaces the entries of the target whatever
// they are, so add refuses a proposal (--pending) where an entry of the
// target applies: the proposal would lift it until approved, as the
// feedback policies' stronger_entry guards against.
func (a ListsAction) add(ctx context.Context, store ListStore, nat clientip.NAT64, v6bits int, now time.Time, w io.Writer) error {
	e := lists.Entry{List: a.List, Target: a.Target, Reason: a.Reason, By: a.By, Pending: a.Pending}
	if a.TTL > 0 {
		e.Expires = now.Add(a.TTL)
	}
	var replaced []lists.Entry
	if t, err := lists.NormalizeTarget(a.Target); err == nil { // else Check has said what is wrong
		es, err := store.Entries(ctx, a.List)
		if err != nil {
			return err
		}
		for _, o := range es {
			if o.Target == t && o.State(now) == lists.StateActive {
				replaced = append(replaced, o)
			}
		}
	}
	if a.Pending && len(replaced) > 0 {
		return fmt.Errorf("add %s to %s as pending: the entry %s applies (%s), and a proposal would replace it, so that it would not apply until approved; "+
			"add without --pending to change it, or remove it first (lists remove) to propose another", a.Target, a.List, replaced[0].Target, described(replaced[0]))
	}
	if err := store.Put(ctx, e); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "%s: add %s\n", a.List, a.Target); err != nil {
		return err
	}
	for _, o := range replaced {
		// An operator who shortens a permanent entry by accident (add
		// --ttl over it) sees it here.
		if _, err := fmt.Fprintf(w, "note: replaced the entry %s that applied (%s)\n", o.Target, described(o)); err != nil {
			return err
		}
	}
	for _, note := range []string{nat64Note(a.Target, nat, now), partOfClient(a, nat, v6bits)} {
		if note == "" {
			continue
		}
		if _, err := fmt.Fprintln(w, "note:", note); err != nil {
			return err
		}
	}
	return nil
}

// partOfClient says, of a's add of an IPv6 address or prefix narrower
// than the prefix of v6bits (identity.ipv6_prefix) the edge counts an
// IPv6 client by, to the deny or challenge list, that the entry holds
// part of one client only: the client can go on from any other address
// of its prefix, as a scraper rotating through its /64 does, and only
// the whole prefix holds it. "" otherwise (allowing one address of a
// prefix is a choice, not a leak).
func partOfClient(a ListsAction, nat clientip.NAT64, v6bits int) string {
	if a.List != lists.Deny && a.List != lists.Challenge {
		return ""
	}
	t, err := lists.NormalizeTarget(a.Target)
	if err != nil || lists.NAT64Target(t, nat) != "" {
		return ""
	}
	p, err := netip.ParsePrefix(t)
	if err != nil {
		addr, err := netip.ParseAddr(t)
		if err != nil {
			return ""
		}
		p = netip.PrefixFrom(addr, addr.BitLen())
	}
	if !p.Addr().Is6() || p.Bits() <= v6bits {
		return ""
	}
	whole := netip.PrefixFrom(p.Addr(), v6bits).Masked()
	return fmt.Sprintf("the edge counts an IPv6 client by its /%d (identity.ipv6_prefix): %s is part of %s, and a client there can go on from any other of its addresses; add %s to %s to hold the whole client",
		v6bits, t, whole, whole, a.List)
}

// everyone refuses a's add of a prefix that holds every address of its
// family (0.0.0.0/0, ::/0 and their spellings, such as ::ffff:0:0/96)
// unless a.Everyone consents: one such entry refuses, challenges or frees
// every client, which a typo in a prefix length should not do unseen (AWS
// WAF refuses /0 in its IP sets altogether). A list file may hold one,
// written on purpose: challenging everyone is a measure against a flood.
func everyone(a ListsAction) error {
	t, err := lists.NormalizeTarget(a.Target)
	if err != nil || a.Everyone {
		return nil // Check says what is wrong with a bad target
	}
	p, err := netip.ParsePrefix(t)
	if err != nil || p.Bits() != 0 {
		return nil
	}
	family := "IPv4"
	if p.Addr().Is6() {
		family = "IPv6"
	}
	does := map[string]string{
		lists.Deny:      "the edge would refuse every one of them",
		lists.Challenge: "the edge would challenge every one of them",
		lists.Allow:     "every one of them would pass every limit",
	}[a.List]
	return fmt.Errorf("add %s to %s: it holds every %s client, and %s; give --everyone to mean it", a.Target, a.List, family, does)
}

// described says of e how long it applies, who wrote it and why, as a
// note to people: the characters of what they wrote that act on the text
// without being drawn are escapes, as in lists show (Go quoting escapes
// them in the reason).
func described(e lists.Entry) string {
	s := "until removed"
	if !e.Expires.IsZero() {
		s = "until " + e.Expires.UTC().Format(time.RFC3339)
	}
	if e.By != "" {
		s += ", by " + visible.Escape(e.By)
	}
	if e.Reason != "" {
		s += ", reason " + strconv.Quote(e.Reason)
	}
	return s
}

// remove removes every entry of a.List that applies or waits for approval
// and that an edge reading through nat reads as a.Target (lists.Alike),
// printing each stored target it removed: such an edge reads
// 2001:db8:64::cb00:7142 and 203.0.113.66 as one client, and removing one
// of them would leave the client listed by the other. It returns
// lists.ErrNotFound when there is none.
func (a ListsAction) remove(ctx context.Context, store ListStore, nat clientip.NAT64, now time.Time, w io.Writer) error {
	t, es, err := a.alike(ctx, store, nat)
	if err != nil {
		return err
	}
	removed := false
	for _, e := range es {
		if s := e.State(now); s != lists.StateActive && s != lists.StatePending {
			continue
		}
		err := store.Remove(ctx, a.List, e.Target, a.By, a.Reason)
		if errors.Is(err, lists.ErrNotFound) {
			continue // removed or expired since it was read
		}
		if err != nil {
			return err
		}
		removed = true
		if _, err := fmt.Fprintf(w, "%s: remove %s%s\n", a.List, e.Target, alikeNote(e.Target, t, nat)); err != nil {
			return err
		}
	}
	if !removed {
		return fmt.Errorf("remove %s from %s: %w", t, a.List, lists.ErrNotFound)
	}
	return nil
}

// approve approves the pending entry of a.Target on a.List, printing the
// target it approved: the entry of that target when there is one (the
// store says what is wrong with it, if anything), else the one pending
// entry that an edge reading through nat reads as a.Target (lists.Alike).
// Of several, it approves none and names them, since each was proposed
// with its own expiry and reason.
func (a ListsAction) approve(ctx context.Context, store ListStore, nat clientip.NAT64, now time.Time, w io.Writer) error {
	t, es, err := a.alike(ctx, store, nat)
	if err != nil {
		return err
	}
	var pending []string
	for _, e := range es {
		if e.Target == t && e.Removed.IsZero() {
			pending = []string{t}
			break
		}
		if e.State(now) == lists.StatePending {
			pending = append(pending, e.Target)
		}
	}
	switch len(pending) {
	case 0:
		return fmt.Errorf("approve %s on %s: %w", t, a.List, lists.ErrNotFound)
	case 1:
	default:
		return fmt.Errorf("approve %s on %s: an edge with this configuration reads %d pending entries as it (identity.nat64_prefixes): %s; approve one by its target as stored",
			t, a.List, len(pending), strings.Join(pending, ", "))
	}
	if err := store.Approve(ctx, a.List, pending[0], a.By); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s: approve %s%s\n", a.List, pending[0], alikeNote(pending[0], t, nat))
	return err
}

// alike checks a's target and who makes the change, and returns the
// target normalized and the entries of a.List that an edge reading through
// nat reads as it (lists.Alike): the one of that target first, then the
// others by target.
func (a ListsAction) alike(ctx context.Context, store ListStore, nat clientip.NAT64) (string, []lists.Entry, error) {
	key := lists.Entry{List: a.List, Target: a.Target, By: a.By}
	if err := key.Validate(); err != nil {
		return "", nil, err
	}
	es, err := store.Entries(ctx, a.List)
	if err != nil {
		return "", nil, err
	}
	es = lists.Alike(es, key.Target, nat)
	slices.SortStableFunc(es, func(x, y lists.Entry) int {
		if (x.Target == key.Target) != (y.Target == key.Target) {
			if x.Target == key.Target {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Target, y.Target)
	})
	return key.Target, es, nil
}

// alikeNote says why an edge reading through nat reads stored, an entry
// lists.Alike found for target, as it reads target; "" when they are one.
func alikeNote(stored, target string, nat clientip.NAT64) string {
	read := lists.NAT64Target(stored, nat)
	switch {
	case stored == target:
		return ""
	case read != "":
		return ": an edge with this configuration reads it as " + read + " (identity.nat64_prefixes)"
	case lists.NAT64Target(target, nat) != "":
		return ": an edge with this configuration reads " + target + " as it (identity.nat64_prefixes)"
	}
	return ": the same clients as " + target
}

// nat64Note says how an edge with identity.nat64_prefixes reads target
// when that is not as written: an entry in one of them as the IPv4
// address or prefix it carries (lists.NAT64Target), and one that holds one
// of them without the IPv4 clients behind it; "" otherwise. What is
// stored stays as written.
func nat64Note(target string, nat clientip.NAT64, now time.Time) string {
	t, err := lists.NormalizeTarget(target)
	if err != nil {
		return ""
	}
	if wide := lists.NewNAT64([]lists.Entry{{Target: t}}, now, nat).Wide(); len(wide) > 0 {
		return wide[0].String()
	}
	read := lists.NAT64Target(t, nat)
	if read == "" {
		return ""
	}
	what := "the IPv4 clients "
	if !strings.Contains(read, "/") {
		what = "the IPv4 client "
	}
	return "identity.nat64_prefixes: an edge with this configuration reads " + t + " as " + what + read + "; one without the setting reads it as written"
}
