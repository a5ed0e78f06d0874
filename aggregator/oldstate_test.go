package aggregator

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestRunLogResumesOldState: a state directory written by an earlier
// RunLog (testdata/oldstate: the code of commit e386882, reading
// testEvents(20_000) in records of 500 with FlushEvery 300, stopped by a
// sink failing after its fifth output, at offset 9,000, its state holding
// outputs not yet delivered) resumes. The outputs it holds are delivered
// again and the log is read on from its position: every output of that
// code's uninterrupted run (testdata/oldstate/want) of events before the
// position is there, byte for byte or, for a window the state held open
// and this code emits in the current partial encoding, the same once both
// are encoded so; and the partials hold every event once.
func TestRunLogResumesOldState(t *testing.T) {
	const stoppedAt = 9000
	ds := testEvents(20_000)
	logDir := filepath.Join(t.TempDir(), "log")
	writeLog(t, logDir, ds)
	state, out := t.TempDir(), t.TempDir()
	want := files(t, filepath.Join("testdata", "oldstate", "want"))
	for name, b := range files(t, filepath.Join("testdata", "oldstate", "state")) {
		writeFile(t, filepath.Join(state, name), b)
	}
	delivered, err := os.ReadFile(filepath.Join("testdata", "oldstate", "delivered.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Fields(string(delivered)) {
		writeFile(t, filepath.Join(out, name), want[filepath.FromSlash(name)])
	}
	st, err := RunLog(context.Background(), LogOptions{Dir: logDir, StateDir: state, FlushEvery: 300,
		Rollup: Options{Window: time.Second, Lateness: 100 * time.Millisecond}, Sinks: []Sink{&PartialsDir{Dir: out}}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Redeliver == 0 || st.Next != 20_000 || st.Read.Events != 20_000-stoppedAt {
		t.Errorf("redelivered %d outputs, read %d events to %d: want the state's pending outputs, the log from %d to its end", st.Redeliver, st.Read.Events, st.Next, stoppedAt)
	}
	got := files(t, out)
	before := 0
	for name, b := range want {
		// <window start>.<partition>.<from>-<to>.rwp
		parts := strings.Split(filepath.Base(name), ".")
		_, to, _ := strings.Cut(parts[2], "-")
		if n, err := strconv.Atoi(to); err != nil || n >= stoppedAt {
			continue
		}
		before++
		if !bytes.Equal(got[name], b) && !sameReencoded(t, got[name], b) {
			t.Errorf("%s, of events before the state's position, differs or is missing", name)
		}
	}
	if before < len(strings.Fields(string(delivered)))+1 {
		t.Errorf("%d outputs before the state's position: want those delivered and those pending", before)
	}
	var decided uint64
	for _, d := range ds {
		if d.Kind == decisions.KindDecision {
			decided++
		}
	}
	if e, n := totals(t, out, time.Second); e != uint64(len(ds)) || n != decided {
		t.Errorf("partials hold %d events and %d decisions, the log %d and %d", e, n, len(ds), decided)
	}
}

// sameReencoded reports whether two partials hold the same aggregates
// once both are encoded by this code: a window the old state held open is
// emitted in the current partial encoding, the old code's in version 2.
func sameReencoded(t *testing.T, got, want []byte) bool {
	t.Helper()
	if got == nil {
		return false
	}
	enc := func(b []byte) []byte {
		p, err := DecodePartial(b)
		if err != nil {
			t.Fatal(err)
		}
		out, err := p.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	return bytes.Equal(enc(got), enc(want))
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestOldPartialsNameTiersUnlisted: a partial of encoding version 2
// (testdata/oldstate/want) names every tier that refused requests in
// Offenders.TiersUnlisted, as it lists no client by refusals per tier; one
// of the current encoding names none; merging carries the names over.
func TestOldPartialsNameTiersUnlisted(t *testing.T) {
	named := 0
	for name, b := range files(t, filepath.Join("testdata", "oldstate", "want")) {
		p, err := DecodePartial(b)
		if err != nil {
			t.Fatal(name, err)
		}
		want := map[string]bool{}
		for k, n := range p.Counts.Cells {
			if n > 0 && Refused(k.Outcome) {
				want[k.Tier] = true
			}
		}
		if !maps.Equal(p.Offenders.TiersUnlisted, want) {
			t.Errorf("%s: tiers unlisted %v, want those that refused: %v", name, p.Offenders.TiersUnlisted, want)
		}
		named += len(want)
		fresh := NewPartial(p.Start, p.Size, 10)
		d := decisions.Decision{Kind: decisions.KindDecision, Time: p.Start, Tier: "other", Outcome: decisions.Block}
		fresh.Update(&d)
		if b, err = fresh.AppendBinary(nil); err != nil {
			t.Fatal(err)
		}
		if fresh, err = DecodePartial(b); err != nil || fresh.Offenders.TiersUnlisted != nil {
			t.Fatalf("a partial of the current encoding: tiers unlisted %v, %v", fresh.Offenders.TiersUnlisted, err)
		}
		if err := fresh.Merge(p, true); err != nil || !maps.Equal(fresh.Offenders.TiersUnlisted, want) {
			t.Errorf("%s merged into a current partial: tiers unlisted %v, %v; want %v", name, fresh.Offenders.TiersUnlisted, err, want)
		}
	}
	if named == 0 {
		t.Error("no old partial refused a request: the test tests nothing")
	}
}
