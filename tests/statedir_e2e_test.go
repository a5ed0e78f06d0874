package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/internal/dirlock"
)

// stateDirLog writes n generated decisions to a new decision log and
// returns its directory.
func stateDirLog(t *testing.T, n int) string {
	t.Helper()
	return writeLog(t, decisiontest.NewGenerator(3, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)).Batch(n))
}

// runBounded runs the binary with args, as runBinaryStatus does, but
// kills it after 20 s and fails the test: a command that should have been
// refused and was not (a serve) would run on and hang it.
func runBounded(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code, out := runBinaryStatusContext(t, ctx, bin, nil, args...)
	if ctx.Err() != nil {
		t.Fatalf("ratewarden %v still running after 20 s\n%s", args, out)
	}
	return code, out
}

// wantInUse fails the test unless a command's exit code and output are
// those of a refusal of dir, held by the process pid.
func wantInUse(t *testing.T, what string, code int, out, dir string, pid int) {
	t.Helper()
	for _, want := range []string{dir, "in use by another process", fmt.Sprintf("pid %d", pid)} {
		if code != 1 || !strings.Contains(out, want) {
			t.Errorf("%s: exit %d, want 1 and %q in its output:\n%s", what, code, want, out)
			return
		}
	}
}

// TestAggregateOneProcessPerStateDir: a second `aggregate --decisions-dir`
// on the state directory of one that runs exits 1 naming the directory
// and the first's pid, having read nothing; once the first is killed
// (SIGKILL: nothing released by hand, its pid still in the LOCK file),
// the second runs, resuming from the first's state.
func TestAggregateOneProcessPerStateDir(t *testing.T) {
	bin := buildBinary(t)
	tmp := t.TempDir()
	logDir, state := stateDirLog(t, 3000), filepath.Join(tmp, "state")
	args := func(partials string) []string {
		return []string{"--decisions-dir", logDir, "--state-dir", state, "--partials", "dir:" + filepath.Join(tmp, partials)}
	}
	first := startAggregate(t, bin, nil, args("partials")...)
	// The second's flags are startAggregate's, so that it can resume
	// from the first's state.
	second := append([]string{"aggregate", "--no-follow", "--window", "1s", "--lateness", "100ms", "--admin-listen", "off"}, args("partials-2")...)
	waitFor(t, "the first aggregator's state", func(context.Context) error {
		_, err := os.Stat(filepath.Join(state, "log.state"))
		return err
	})
	code, out := runBounded(t, bin, second...)
	wantInUse(t, "a second aggregate", code, out, state, first.cmd.Process.Pid)
	if strings.Contains(out, "aggregate: events") {
		t.Errorf("the refused aggregate read the log:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(tmp, "partials-2")); err == nil {
		t.Errorf("the refused aggregate made its partials directory")
	}

	first.cmd.Process.Kill()
	first.cmd.Wait()
	if b, _ := os.ReadFile(filepath.Join(state, dirlock.File)); strings.TrimSpace(string(b)) != fmt.Sprint(first.cmd.Process.Pid) {
		t.Errorf("LOCK holds %q after the kill, want the killed process's pid", b)
	}
	code, out = runBounded(t, bin, second...)
	if code != 0 || !strings.Contains(out, "next offset 3000,") {
		t.Errorf("aggregate after the first was killed: exit %d, want 0 and the log read to offset 3000:\n%s", code, out)
	}
}

// TestStateDirInUse: every command that owns a state directory (aggregate
// --decisions-dir, with --alerts or not; alerts) or an output directory
// (replay --out) exits 1 when another process holds it, naming the
// directory and that process's pid, and leaves it alone; a Kinesis
// aggregator, which shares its --state-dir with the others of its group,
// a shard each, takes no lock and runs.
func TestStateDirInUse(t *testing.T) {
	bin := buildBinary(t)
	tmp := t.TempDir()
	logDir, held := stateDirLog(t, 100), filepath.Join(tmp, "held")
	cfg := filepath.Join(tmp, "alerts.yaml")
	if err := os.WriteFile(cfg, []byte("tiers:\n  anonymous:\n    global: {limit: 60, window: 1m}\nalerts: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The holder is this process, as another ratewarden would hold it.
	lk, err := dirlock.Acquire(held)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	partials := "dir:" + filepath.Join(tmp, "partials")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"aggregate", []string{"aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", logDir, "--state-dir", held, "--partials", partials}},
		{"aggregate --alerts", []string{"aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", logDir, "--state-dir", held, "--alerts", cfg}},
		// --follow: without it, alerts refuses the partials directory (none
		// yet) before it comes to the state directory.
		{"alerts", []string{"alerts", "--follow", "--config", cfg, "--partials", partials, "--state-dir", held}},
		{"replay", []string{"replay", "--decisions-dir", logDir, "--out", held}},
	} {
		code, out := runBounded(t, bin, c.args...)
		wantInUse(t, c.name, code, out, held, os.Getpid())
		if ents, err := os.ReadDir(held); err != nil || len(ents) != 1 {
			t.Errorf("%s: the held directory holds %d files (%v), want its LOCK alone", c.name, len(ents), err)
		}
	}

	t.Run("kinesis", func(t *testing.T) {
		env := standInEnv(t)
		suffix := fmt.Sprint(time.Now().UnixNano())
		stream, leases := "e2e-lock-"+suffix, "e2e-lock-leases-"+suffix
		runBinary(t, bin, env, "aws", "init", "--stream", stream, "--shards", "1", "--counters-table", "", "--lists-table", "",
			"--leases-table", leases, "--state-table", "", "--partials-table", "")
		agg := startAggregate(t, bin, env, "--kinesis-stream", stream, "--leases-table", leases, "--consumer-group", "held",
			"--state-dir", held, "--partials", partials)
		waitFor(t, "the Kinesis aggregator to take its shard", func(context.Context) error {
			if n := len(leaseOwners(t, leases, "held/"+stream)); n != 1 {
				return fmt.Errorf("%d lease holders\n%s", n, agg.out.String())
			}
			return nil
		})
		agg.stop(t)
	})
}

// TestServeStateDirInUse: a second `serve` on the state directory of one
// that runs (with a decision log of its own, which it could open) exits 1
// naming the directory and the first's pid, before its edge listens.
func TestServeStateDirInUse(t *testing.T) {
	bin := buildBinary(t)
	tmp := t.TempDir()
	state := filepath.Join(tmp, "state")
	first := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--dashboard-listen", "off",
		"--decisions-dir", filepath.Join(tmp, "log-1"), "--state-dir", state, "--partials-dir", filepath.Join(tmp, "partials-1"))
	first.Dir = tmp
	startEdgeCommand(t, first)

	code, out := runBounded(t, bin, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--dashboard-listen", "off",
		"--decisions-dir", filepath.Join(tmp, "log-2"), "--state-dir", state, "--partials-dir", filepath.Join(tmp, "partials-2"))
	wantInUse(t, "a second serve", code, out, state, first.Process.Pid)
	if strings.Contains(out, "listening") {
		t.Errorf("the refused serve started:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(tmp, "log-2")); err == nil {
		t.Errorf("the refused serve made its decision log")
	}
}

// TestStateDirIsTheLog: an aggregator's state directory that is the
// decision log's, under whatever name, is refused before anything is
// locked or written: aggregate exits 2 naming both flags, serve exits 1
// naming both keys. Before, aggregate took the log's LOCK, so the edge
// that writes the log could not start while it ran (or aggregate could
// not start while the edge ran), each told only that the directory was
// in use.
func TestStateDirIsTheLog(t *testing.T) {
	bin := buildBinary(t)
	logDir := stateDirLog(t, 10)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(logDir, link); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadDir(logDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", logDir, "--state-dir", logDir + "/.", "--emf", "stdout"}, 2,
			"is the decision log's directory (--decisions-dir " + logDir + ")"},
		{[]string{"aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", logDir, "--state-dir", link, "--emf", "stdout"}, 2,
			"--state-dir " + link + " is the decision log's directory"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--dashboard-listen", "off",
			"--decisions-dir", logDir, "--state-dir", link, "--partials-dir", filepath.Join(t.TempDir(), "partials")}, 1,
			"state directory (serve.state_dir, --state-dir) " + link + " is the decision log's (decisions.dir, --decisions-dir) " + logDir},
	} {
		code, out := runBounded(t, bin, c.args...)
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, want %d and %q:\n%s", strings.Join(c.args, " "), code, c.code, c.want, out)
		}
	}
	after, err := os.ReadDir(logDir)
	if err != nil || len(after) != len(before) {
		t.Errorf("the log directory holds %d files after (%v), %d before: something was written there", len(after), err, len(before))
	}
}
