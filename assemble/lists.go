package assemble

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge/lists"
	"github.com/ratewarden/ratewarden/internal/clientip"
)

// ListStore is what `ratewarden lists` needs of a store of feedback lists:
// lists.FileStore and lists.TableStore, and the aggregator's feedback
// policies through their own Put and Remove.
type ListStore interface {
	Put(ctx context.Context, e lists.Entry) error
	Remove(ctx context.Context, list, target, by string) error
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
	Reason  string        // add: why
	By      string        // who
	Pending bool          // add: proposed, applies once approved
	JSON    bool          // show: JSON instead of a table
}

// ListsActions are the actions of ListsAction.
var ListsActions = []string{"show", "add", "remove", "approve"}

// Run does a on the lists cfg names, at now, printing to w what show shows
// and what the others did.
func (a ListsAction) Run(ctx context.Context, cfg *config.Config, now func() time.Time, w io.Writer) error {
	if now == nil {
		now = time.Now
	}
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
	store, names, _, err := OpenLists(ctx, cfg, now)
	if err != nil {
		return err
	}
	if a.List != "" && !slices.Contains(names, a.List) {
		return fmt.Errorf("--list %s: not configured (lists.%s_file); configured: %s", a.List, a.List, strings.Join(names, ", "))
	}
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
		return lists.Show(w, all, now(), a.JSON)
	case "add":
		e := lists.Entry{List: a.List, Target: a.Target, Reason: a.Reason, By: a.By, Pending: a.Pending}
		if a.TTL > 0 {
			e.Expires = now().Add(a.TTL)
		}
		err = store.Put(ctx, e)
	case "remove":
		err = store.Remove(ctx, a.List, a.Target, a.By)
	case "approve":
		err = store.Approve(ctx, a.List, a.Target, a.By)
	}
	if err != nil {
		return err
	}
	if _, err = fmt.Fprintf(w, "%s: %s %s\n", a.List, a.Action, a.Target); err != nil || a.Action != "add" {
		return err
	}
	if note := nat64Note(a.Target, cfg.Identity.NAT64(), now()); note != "" {
		_, err = fmt.Fprintln(w, "note:", note)
	}
	return err
}

// nat64Note says how an edge with identity.nat64_prefixes reads target
// when that is not as written: an entry in one of them as the IPv4
// address or prefix it carries, and one that holds one of them without
// the IPv4 clients behind it; "" otherwise. What is stored stays as
// written.
func nat64Note(target string, nat clientip.NAT64, now time.Time) string {
	t, err := lists.NormalizeTarget(target)
	if err != nil {
		return ""
	}
	l := lists.NewNAT64([]lists.Entry{{Target: t}}, now, nat)
	if wide := l.Wide(); len(wide) > 0 {
		return wide[0].String()
	}
	ps, _ := l.Targets(now)
	if len(ps) != 1 || !ps[0].Addr().Is4() || !strings.Contains(t, ":") {
		return ""
	}
	read := "the IPv4 clients " + ps[0].String()
	if ps[0].IsSingleIP() {
		read = "the IPv4 client " + ps[0].Addr().String()
	}
	return "identity.nat64_prefixes: an edge with this configuration reads " + t + " as " + read + "; one without the setting reads it as written"
}
