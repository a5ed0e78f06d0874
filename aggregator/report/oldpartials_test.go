package report

import (
	"bytes"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/decisions"
)

// oldPartials reads the partials of encoding version 2 the aggregator's
// old-state test keeps (../testdata/oldstate/want: nine 1 s windows), as
// `ratewarden report` would.
func oldPartials(t *testing.T) (w *Windows, from, to time.Time) {
	t.Helper()
	from = time.Unix(0, 1796007599000000000).UTC()
	to = from.Add(10 * time.Second)
	w, err := ReadDir(t.Context(), filepath.Join("..", "testdata", "oldstate", "want"), time.Second, from, to, nil)
	if err != nil || len(w.Problems) > 0 || len(w.Parts) != 9 {
		t.Fatalf("read the old partials: %d windows, %v, %v", len(w.Parts), w.Problems, err)
	}
	return w, from, to
}

// refusingWindows counts, by tier, the windows of w in which the tier
// refused requests.
func refusingWindows(w *Windows) map[string]int {
	n := map[string]int{}
	for _, p := range w.Parts {
		seen := map[string]bool{}
		for k, c := range p.Counts.Cells {
			if c > 0 && aggregator.Refused(k.Outcome) && !seen[k.Tier] {
				seen[k.Tier] = true
				n[k.Tier]++
			}
		}
	}
	return n
}

// tierRows returns the tier top-client rows of the Markdown report md for
// tier, by identity, as cells.
func tierRows(md, tier string) map[string][]string {
	rows := map[string][]string{}
	for line := range strings.Lines(md) {
		cells := strings.Split(strings.TrimSpace(line), " | ")
		if len(cells) == 14 && cells[0] == "| "+tier {
			rows[strings.Trim(cells[1], "`")] = cells // the identity is a code span
		}
	}
	return rows
}

// The top clients of a tier read from partials of encoding version 1 or
// 2, which list no client by refusals per tier, show refusals as unknown,
// not 0; where partials of the current encoding list some, in windows of
// their own or merged into an old window's (two partitions), their count
// is the lower bound, and the window that mixes both versions still
// counts as unlisted.
func TestTierRefusalsOfOldPartials(t *testing.T) {
	w, from, to := oldPartials(t)
	refusing := refusingWindows(w)
	// A client blocked 500 times in one tier, 300 of them in a window of
	// its own in the current encoding and 200 in another partition's
	// partial of an old window.
	var tier string
	for name := range refusing {
		tier = max(tier, name)
	}
	if tier == "" {
		t.Fatal("no tier refused a request in the old partials: the test tests nothing")
	}
	heavy := netip.MustParseAddr("10.9.9.1")
	fresh := func(start time.Time, n int) *aggregator.Partial {
		p := aggregator.NewPartial(start, time.Second, 100)
		for range n {
			d := decisions.Decision{Kind: decisions.KindDecision, Time: start, ClientIP: heavy, Tier: tier, Rule: tier + ":global", Outcome: decisions.Block}
			p.Update(&d)
		}
		return p
	}
	only := Build(w, nil, Options{From: from, To: to, TopK: 100})

	w, _, _ = oldPartials(t)
	w.Parts[from.Add(9*time.Second)] = fresh(from.Add(9*time.Second), 300)
	if err := w.Parts[from].Merge(fresh(from, 200), true); err != nil {
		t.Fatal(err)
	}
	mixed := Build(w, nil, Options{From: from, To: to, TopK: 100})

	for _, c := range []struct {
		name  string
		r     *Report
		heavy uint64 // refusals (min) of heavy in tier; 0: not listed
	}{{"old partials", only, 0}, {"old and current partials", mixed, 500}} {
		var md bytes.Buffer
		if err := c.r.Render(&md, Markdown); err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, tr := range c.r.Tiers {
			if tr.RefusalsUnlisted != refusing[tr.Name] {
				t.Errorf("%s: tier %s: %d windows without refusal lists, %d windows refused", c.name, tr.Name, tr.RefusalsUnlisted, refusing[tr.Name])
			}
			if refusing[tr.Name] == 0 {
				continue
			}
			if !strings.Contains(md.String(), "list no client by refusals in this tier") {
				t.Errorf("%s: tier %s: the report does not say its refusals are unknown", c.name, tr.Name)
			}
			rows := tierRows(md.String(), tr.Name)
			for _, o := range tr.Top {
				wantMin := uint64(0)
				if o.Identity == heavy.String() && tr.Name == tier {
					wantMin = c.heavy
				}
				if !o.RefusalsUnknown || o.Refusals != o.Requests || o.RefusalsMin != wantMin {
					t.Errorf("%s: tier %s: %s: refusals %d to %d, unknown %v; want unknown, %d to its requests (%d)",
						c.name, tr.Name, o.Identity, o.RefusalsMin, o.Refusals, o.RefusalsUnknown, wantMin, o.Requests)
				}
				if row := rows[o.Identity]; row == nil || row[4] != "-" {
					t.Errorf("%s: tier %s: %s's row %q: want refusals -", c.name, tr.Name, o.Identity, row)
				}
				checked++
			}
		}
		if checked == 0 {
			t.Errorf("%s: no tier's top client checked", c.name)
		}
	}
	var listed bool
	for _, tr := range mixed.Tiers {
		for _, o := range tr.Top {
			listed = listed || tr.Name == tier && o.Identity == heavy.String()
		}
	}
	if !listed {
		t.Errorf("%s is not among tier %s's top clients", heavy, tier)
	}
}
