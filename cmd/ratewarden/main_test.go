package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/edge/challenge"
)

var testKey = "k1:" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

func runCLI(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCLIContext(t, context.Background(), env, args...)
}

// runCLIContext is runCLI, the command run until ctx is done.
func runCLIContext(t *testing.T, ctx context.Context, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(ctx, args, &out, &errb, func(k string) string { return env[k] })
	code = exitCode(err, &errb)
	return code, out.String(), errb.String()
}

func TestUsageAndHelp(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{nil, 2, "Usage:"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"--help"}, 0, "ratewarden edge"},
		{[]string{"version"}, 0, "ratewarden dev"},
		{[]string{"version", "--help"}, 0, "Usage: ratewarden version"},
		{[]string{"version", "extra"}, 2, "Usage: ratewarden version"},
		{[]string{"decisions", "cat", "--kinesis-stream", "s", "--from", "5"}, 2, "--from is an offset in a decision log"},
		{[]string{"decisions", "cat", "--kinesis-stream", "s", "--from", "0"}, 2, "--from is an offset in a decision log"},
		{[]string{"decisions", "cat", "--dir", "d", "--format", "csv"}, 2, `--format "csv": want json or table`},
		{[]string{"decisions", "cat", "--dir", "d", "--kinesis-stream", "s"}, 2, "--dir and --kinesis-stream: give one source, not both"},
		{[]string{"decisions", "cat"}, 2, "Usage: ratewarden decisions cat"},
		{[]string{"decisions", "cat", "--dir", "d", "--since", "2026-03-02T10:00:00Z", "--until", "2026-03-02T09:59:59.5Z"}, 2,
			"--since 2026-03-02T10:00:00Z is not before --until 2026-03-02T09:59:59.5Z"},
		{[]string{"decisions", "cat", "--kinesis-stream", "s", "--since", "2026-03-02T10:00:00Z", "--until", "2026-03-02T10:00:00Z"}, 2, "is not before --until"},
		{[]string{"edge", "--help"}, 0, "-upstream"},
		{[]string{"edge", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"edge", "--server", "nginx", "--listen", "127.0.0.1:0", "--admin-listen", "off"}, 2, `--server "nginx": want one of fasthttp, net/http`},
		{[]string{"serve", "--server", "http2", "--listen", "127.0.0.1:0", "--admin-listen", "off"}, 2, `--server "http2": want one of fasthttp, net/http`},
		{[]string{"config", "--help"}, 0, "config check FILE"},
		{[]string{"config", "check", "--help"}, 0, "Usage: ratewarden config check"},
		{[]string{"config"}, 2, "Usage: ratewarden config check"},
		{[]string{"token", "issue", "--help"}, 0, "-ip"},
		{[]string{"token", "issue", "--ip", "1.2.3.4", "--user", "u"}, 2, "exactly one of --ip or --user"},
		{[]string{"edge", "--config", "../../examples/minimal.yaml"}, 1, "sets no edge.upstream: name the origin there or with --upstream URL (--upstream builtin serves a demo origin)"},
		{[]string{"lambda", "--help"}, 0, "-upstream"},
		{[]string{"rls", "--help"}, 0, "Usage: ratewarden rls"},
		{[]string{"rls", "extra"}, 2, "Usage: ratewarden rls"},
		{[]string{"authz", "--help"}, 0, "-listen"},
		{[]string{"authz", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"rls", "--listen", "nowhere"}, 2, `--listen "nowhere": is not allowed; use host:port`},
		// lists' flags are checked before the configuration is read
		// (x.yaml does not exist): each exited 1, after reading it.
		{[]string{"lists", "show", "--config", "x.yaml", "--list", "bogus"}, 2, `--list "bogus": want one of`},
		{[]string{"lists", "add", "--config", "x.yaml", "--list", "deny", "192.0.2.1", "--by", "a", "--ttl", "-1h"}, 2, "--ttl -1h0m0s: want a positive duration"},
		{[]string{"lists", "remove", "--config", "x.yaml", "--list", "deny", "192.0.2.1", "--by", " "}, 2, "--by is empty"},
		{[]string{"lists", "remove", "--config", "x.yaml", "--list", "deny", "192.0.2.1", "--by", "a", "--pending"}, 2, "--pending: with add only"},
		{[]string{"lists", "add", "--config", "x.yaml", "192.0.2.1", "--by", "a"}, 2, "lists add: want --list"},
		// A bad target, and a /0 without --everyone, are bad input too,
		// found before the configuration is read; they exited 1.
		{[]string{"lists", "add", "--config", "x.yaml", "--list", "deny", "bogus", "--by", "a"}, 2, `target "bogus": not an IP address, a CIDR or user:<id>`},
		{[]string{"lists", "add", "--config", "x.yaml", "--list", "deny", "10.0.0.1/8", "--by", "a"}, 2, `target "10.0.0.1/8": host bits set; want 10.0.0.0/8, or 10.0.0.1 for the one address`},
		{[]string{"lists", "add", "--config", "x.yaml", "--list", "deny", "10.0.0.0/33", "--by", "a"}, 2, `target "10.0.0.0/33": not an IP address`},
		{[]string{"lists", "add", "--config", "x.yaml", "--list", "deny", "user:", "--by", "a"}, 2, `target "user:": empty user id; want user:<id>`},
		{[]string{"lists", "add", "--config", "x.yaml", "--list", "allow", "0.0.0.0/0", "--by", "a"}, 2, "add 0.0.0.0/0 to allow: it holds every IPv4 client, and every one of them would pass every limit; give --everyone to mean it"},
		{[]string{"lists", "add", "--config", "x.yaml", "--list", "deny", "::/0", "--by", "a"}, 2, "add ::/0 to deny: it holds every IPv6 client"},
		{[]string{"lists", "remove", "--config", "x.yaml", "--list", "deny", "bogus", "--by", "a"}, 2, `target "bogus": not an IP address`},
		{[]string{"lists", "approve", "--config", "x.yaml", "--list", "deny", "10.0.0.1/8", "--by", "a"}, 2, `target "10.0.0.1/8": host bits set`},
		{[]string{"lists", "add", "--config", "x.yaml", "--list", "deny", "192.0.2.1", "--by", "a", "--reason", "a\x1b[2Jb"}, 2, "--reason: reason with a control character at byte 2; want printable text"},
		{[]string{"lists", "add", "--config", "x.yaml", "--list", "deny", "192.0.2.1", "--by", "a\tb"}, 2, "--by: by with a control character at byte 2; want printable text"},
		{[]string{"aws", "--help"}, 0, "Usage: ratewarden aws init"},
		{[]string{"aws"}, 2, "Usage: ratewarden aws init"},
		// Names AWS refuses are bad flags, found before anything is
		// created: aws init --stream "bad name!" created every table,
		// then failed on the stream (exit 1).
		{[]string{"aws", "init", "--stream", "bad name!"}, 2, `--stream "bad name!": want 1 to 128 of a-z, A-Z, 0-9, _ . -, or "" to skip`},
		{[]string{"aws", "init", "--counters-table", "a"}, 2, `--counters-table "a": want 3 to 255 of a-z, A-Z, 0-9, _ . -, or "" to skip`},
		{[]string{"aws", "init", "--partials-table", "x/y"}, 2, `--partials-table "x/y": want 3 to 255`},
		{[]string{"aws", "init", "--wait", "0s"}, 2, "--wait 0s: want more than 0"},
		{[]string{"aws", "init", "--shards", "0"}, 2, "--shards 0: want 1 or more"},
		{[]string{"lambda"}, 1, "AWS_LAMBDA_RUNTIME_API is not set"},
		{[]string{"lambda", "--aggregate", "--commit-records", "-1"}, 2, "--commit-records -1: want 0 (the whole batch) to 10000"},
		// Checked before the runtime is required (no AWS_LAMBDA_RUNTIME_API here).
		{[]string{"lambda", "--aggregate", "--window", "7s"}, 2, "--window 7s"},
		{[]string{"lambda", "--report", "--format", "xml"}, 2, `--format "xml"`},
		{[]string{"lambda", "--report", "--window", "7s"}, 2, "--window 7s: want 1s to 24h"},
		{[]string{"lambda", "--report", "--report-range", "0s"}, 2, "--report-range 0s: want at least one window"},
		{[]string{"lambda", "--config", "no-such.yaml"}, 1, "no-such.yaml"},
		{[]string{"lambda", "--upstream", "ftp://x"}, 2, `--upstream "ftp://x": is not allowed; use an absolute http or https URL`},
		// A flag of another mode is refused, not ignored: --window and
		// --partials without --aggregate ran the edge's Lambda.
		{[]string{"lambda", "--window", "5m", "--partials", "dir:p"}, 2, "lambda: --partials is for --aggregate and --report"},
		{[]string{"lambda", "--aggregate", "--format", "csv"}, 2, "lambda: --format is for --report only"},
		{[]string{"lambda", "--report", "--partials", "dir:p", "--commit-records", "5"}, 2, "lambda: --commit-records is for --aggregate only"},
		{[]string{"lambda", "--aggregate", "--upstream", "http://o"}, 2, "lambda: --upstream is for the edge's Lambda (neither --aggregate nor --report)"},
		{[]string{"lambda", "--aggregate", "--window", "1m"}, 1, "AWS_LAMBDA_RUNTIME_API is not set"},
		{[]string{"alerts"}, 2, "Usage: ratewarden alerts"},
		{[]string{"alerts", "--config", "x.yaml", "--partials", "x", "--state-dir", "s"}, 2, `--partials "x": want dir:PATH or dynamodb:TABLE`},
		// The configuration is read before the store is looked at: a bad
		// one was hidden behind the store's error.
		{[]string{"alerts", "--config", "no-such.yaml", "--partials", "dir:/nonexistent", "--state-dir", "s"}, 1, "no-such.yaml"},
		{[]string{"report", "--from", "-1h", "--partials", "dynamodb:"}, 2, `--partials "dynamodb:": want dir:PATH or dynamodb:TABLE`},
		// A store or sink spec of the wrong form is a bad flag, found
		// before anything starts (it exited 1, and lambda's said only
		// that this is not Lambda).
		{[]string{"aggregate", "--stdin", "--partials", "x"}, 2, `--partials "x": want dir:PATH or dynamodb:TABLE`},
		{[]string{"aggregate", "--stdin", "--emf", "bogus"}, 2, `--emf "bogus": want stdout | file:PATH`},
		{[]string{"serve", "--partials", "dynamodb:x"}, 2, `--partials "dynamodb:x": want dir:PATH or dynamodb:TABLE`},
		{[]string{"serve", "--emf", "file:"}, 2, `--emf "file:": want stdout | file:PATH`},
		{[]string{"serve", "--partials-dir", "p", "--partials", "dir:q"}, 2, "give --partials-dir or --partials, not both"},
		{[]string{"lambda", "--report"}, 2, `--partials "": want dir:PATH or dynamodb:TABLE`},
		{[]string{"lambda", "--report", "--partials", "x"}, 2, `--partials "x": want dir:PATH or dynamodb:TABLE`},
		{[]string{"lambda", "--aggregate", "--partials", "x"}, 2, `--partials "x": want dir:PATH or dynamodb:TABLE`},
		{[]string{"lambda", "--aggregate", "--report", "--partials", "dir:p"}, 2, "--aggregate and --report: give one"},
		{[]string{"aggregate", "--kinesis-stream", "s", "--state-dir", "d", "--partials", "dir:p", "--alerts", "x.yaml"}, 2, "--alerts with --kinesis-stream: --alerts is for --decisions-dir only (it needs whole windows"},
		{[]string{"aggregate", "--stdin", "--emf", "stdout", "--rules", "anonymous:global,global"}, 2, `--rules "global": want rule ids`},
		// Found before anything is opened; it exited 1, as if it had run.
		{[]string{"aggregate", "--stdin"}, 2, "aggregate: nothing to write: give --partials, --emf, --alerts or several"},
		{[]string{"aggregate", "--decisions-dir", "l", "--state-dir", "d"}, 2, "aggregate: nothing to write"},
		{[]string{"replay", "--decisions-dir", "d", "--out", "o", "--config", "no-such.yaml"}, 1, "no-such.yaml"},
		{[]string{"aggregate", "--kinesis-stream", "s", "--state-dir", "d", "--poll", "100ms"}, 2, "--poll 100ms: want 200ms to 1m"},
		{[]string{"aggregate", "--kinesis-stream", "s", "--state-dir", "d", "--poll", "2m"}, 2, "--poll 2m0s: want 200ms to 1m"},
		{[]string{"aggregate", "--decisions-dir", "l", "--state-dir", "d", "--linger", "0s"}, 2, "--linger 0s: want 1ms to 10s"},
		{[]string{"aggregate", "--decisions-dir", "l", "--state-dir", "d", "--linger", "11s"}, 2, "--linger 11s: want 1ms to 10s"},
		{[]string{"aggregate", "--stdin", "--emf", "stdout", "--idle", "50ms"}, 2, "--idle 50ms: want 100ms to 1h"},
		{[]string{"aggregate", "--stdin", "--emf", "stdout", "--idle", "2h"}, 2, "--idle 2h0m0s: want 100ms to 1h"},
		{[]string{"aggregate", "--stdin", "--emf", "stdout", "--idle", "soon"}, 2, `invalid value "soon" for flag -idle`},
		// A value the flag package cannot parse is named with the kind of
		// value wanted (it said "parse error", and the usage after it).
		{[]string{"aggregate", "--stdin", "--emf", "stdout", "--idle", "soon"}, 2, `--idle "soon": want a duration, such as 500ms, 30s or 1h30m`},
		{[]string{"report", "--from", "1h", "--partials", "dir:p", "--top", "ten"}, 2, `--top "ten": want a whole number`},
		// A number past its type, and a value whose flag states a range.
		{[]string{"aggregate", "--stdin", "--emf", "stdout", "--top-k", "99999999999999999999"}, 2, `--top-k "99999999999999999999": want a whole number, 1 to 100000`},
		{[]string{"replay", "--decisions-dir", "d", "--out", "o", "--max-names", "99999999999999999999"}, 2, `--max-names "99999999999999999999": want a whole number, 1 to 65536`},
		{[]string{"aggregate", "--stdin", "--emf", "stdout", "--window", "9999999999h"}, 2, `--window "9999999999h": want a duration, such as 500ms, 30s or 1h30m, 1s to 24h, dividing an hour or a multiple of one`},
		{[]string{"aggregate", "--stdin", "--emf", "stdout", "--lateness", "1e9h"}, 2, `--lateness "1e9h": want a duration, such as 500ms, 30s or 1h30m, 0 to ten windows`},
		{[]string{"aggregate", "--stdin", "--emf", "stdout", "--idle", "x"}, 2, `--idle "x": want a duration, such as 500ms, 30s or 1h30m, 100ms to 1h`},
		// "now" is one time in all the flags of a command: an empty range,
		// where the two were read a few nanoseconds apart and ran.
		{[]string{"report", "--from", "now", "--to", "now", "--partials", "dir:p"}, 2, "is not before --to"},
		{[]string{"report", "--from", "now", "--partials", "dir:p"}, 2, "is not before --to"},
		{[]string{"replay", "--decisions-dir", "d", "--out", "o", "--from", "now", "--to", "now"}, 2, "is not before --to"},
		{[]string{"decisions", "cat", "--dir", "d", "--since", "now", "--until", "now"}, 2, "is not before --until"},
		{[]string{"report", "--from", "-1h", "--partials", "dir:p", "--out", "."}, 2, "--out . is a directory: want the report's file, such as report.md"},
		{[]string{"whatif", "--config", "../../examples/seed.yaml", "--decisions-dir", "d", "--from", "-1h", "--format", "csv", "--out", ".."}, 2, "--out .. is a directory: want the report's file, such as ../report.csv"},
		{[]string{"demo", "--speed", "fast"}, 2, `--speed "fast": want a number, such as 10 or 2.5`},
		{[]string{"aggregate", "--stdin", "--no-follow=maybe"}, 2, `--no-follow "maybe": want true or false`},
		{[]string{"aggregate", "--help"}, 0, "-idle duration"},
		{[]string{"aggregate", "--stdin", "--emf", "stdout", "--rule-budget", "0"}, 2, "--rule-budget 0: want 1 to 65536"},
		{[]string{"aggregate", "--stdin", "--emf", "stdout", "--rule-budget", "-1"}, 2, "--rule-budget -1: want 1 to 65536"},
		{[]string{"aggregate", "--stdin", "--emf", "metrics", "--emf-timeout", "50ms"}, 2, "--emf-timeout 50ms: want 0 (each sink's own) or 100ms to 10m"},
		{[]string{"aggregate", "--stdin", "--emf", "metrics", "--emf-timeout", "11m"}, 2, "--emf-timeout 11m0s: want 0 (each sink's own) or 100ms to 10m"},
		{[]string{"aggregate", "--stdin", "--emf", "metrics", "--emf-timeout", "-1s"}, 2, "--emf-timeout -1s: want 0 (each sink's own) or 100ms to 10m"},
		{[]string{"serve", "--emf", "agent:tcp://127.0.0.1:25888", "--emf-timeout", "1h"}, 2, "--emf-timeout 1h0m0s: want 0 (each sink's own) or 100ms to 10m"},
		{[]string{"aggregate", "--stdin", "--emf", "metrics", "--emf-timeout", "5"}, 2, `--emf-timeout "5": want a duration, such as 500ms, 30s or 1h30m, 0 or 100ms to 10m`},
		{[]string{"aggregate", "--stdin", "--emf", "stdout", "--emf-timeout", "5s"}, 2, `--emf-timeout 5s: only --emf agent:ADDR, logs:GROUP and metrics wait for a flush; --emf is "stdout"`},
		{[]string{"serve", "--idle", "0s"}, 2, "--idle 0s: want 100ms to 1h"},
		{[]string{"serve", "--help"}, 0, "-dashboard-listen"},
		{[]string{"serve", "extra"}, 2, "Usage: ratewarden serve"},
		{[]string{"serve", "--dashboard-listen", "0.0.0.0:0"}, 1, `dashboard listen "0.0.0.0:0": not a loopback address, and no token protects the dashboard`},
		{[]string{"serve", "--dashboard-listen", ":0"}, 1, "not a loopback address"},
		{[]string{"dashboards", "--help"}, 0, "-apply"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, nil, c.args...)
			if code != c.code || !strings.Contains(out+errs, c.want) {
				t.Errorf("exit %d, want %d; output lacks %q:\n%s%s", code, c.code, c.want, out, errs)
			}
		})
	}
}

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("tiers:\n  anonymous:\n    global:\n      limit: 60\n      algorithm: leaky\n"), 0o600)
	code, out, errs := runCLI(t, nil, "config", "check", "../../examples/seed.yaml", "../../examples/minimal.yaml")
	if code != 0 || strings.Count(out, ": ok") != 2 {
		t.Errorf("valid files: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCLI(t, nil, "config", "check", "../../examples/seed.yaml", bad)
	want := bad + `:5: tiers.anonymous.global.algorithm: "leaky" is not allowed; use one of fixed_window, sliding_window, token_bucket, concurrency`
	if code != 1 || !strings.Contains(errs, want) || !strings.Contains(errs, "1 of 2 configuration files are invalid") {
		t.Errorf("bad file: exit %d\nstdout %s\nstderr %s\nwant %s", code, out, errs, want)
	}
}

func TestTokenIssue(t *testing.T) {
	code, _, errs := runCLI(t, nil, "token", "issue", "--ip", "203.0.113.7")
	if code != 1 || !strings.Contains(errs, "RATEWARDEN_CHALLENGE_KEYS is not set") {
		t.Errorf("no keys: exit %d %s", code, errs)
	}
	env := map[string]string{"RATEWARDEN_CHALLENGE_KEYS": testKey}
	keys, err := challenge.ParseKeys(testKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args    []string
		subject string
	}{
		{[]string{"--ip", "203.0.113.7"}, "ip:203.0.113.7"},
		{[]string{"--ip", "2001:db8:1:2:3:4:5:6"}, "ip:2001:db8:1:2::"}, // counted per /64
		{[]string{"--user", "u_1", "--ttl", "5m"}, "user:u_1"},
	} {
		code, out, errs := runCLI(t, env, append([]string{"token", "issue"}, c.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d %s", c.args, code, errs)
		}
		if _, err := keys.Verify(strings.TrimSpace(out), c.subject, time.Now()); err != nil {
			t.Errorf("%v: token does not verify for %s: %v", c.args, c.subject, err)
		}
	}
	if code, _, errs := runCLI(t, env, "token", "issue", "--ip", "nope"); code != 2 || !strings.Contains(errs, "--ip") {
		t.Errorf("bad ip: exit %d %s", code, errs)
	}
}

// TestTokenIssueRefuses: a user id the edge would not believe, and a
// --ttl outside 1s to config.MaxTokenTTL, are bad flags (exit 2) naming
// the flag and what it wants, with or without keys: such a token would
// never let its client through, or would outlive what the configuration
// allows.
func TestTokenIssueRefuses(t *testing.T) {
	env := map[string]string{"RATEWARDEN_CHALLENGE_KEYS": testKey}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--user", " bob"}, `--user " bob": user id with white space at its start or end`},
		{[]string{"--user", "bob\n"}, `--user "bob\n": user id with a control character`},
		{[]string{"--user", "b\xffb"}, "user id is not valid UTF-8"},
		{[]string{"--user", strings.Repeat("u", 257)}, "user id of 257 bytes, at most 256"},
		{[]string{"--ip", "203.0.113.7", "--ttl", "500ms"}, "--ttl 500ms: want a duration from 1s to 24h"},
		{[]string{"--ip", "203.0.113.7", "--ttl", "0s"}, "--ttl 0s: want a duration from 1s to 24h"},
		{[]string{"--ip", "203.0.113.7", "--ttl", "-1m"}, "--ttl -1m0s: want a duration from 1s to 24h"},
		{[]string{"--user", "u_1", "--ttl", "24h1s"}, "--ttl 24h0m1s: want a duration from 1s to 24h"},
	} {
		for _, env := range []map[string]string{env, nil} {
			code, out, errs := runCLI(t, env, append([]string{"token", "issue"}, c.args...)...)
			if code != 2 || out != "" || !strings.Contains(errs, c.want) {
				t.Errorf("%q (keys %t): exit %d, want 2; stdout %q; stderr lacks %q:\n%s", c.args, env != nil, code, out, c.want, errs)
			}
		}
	}
	for _, ttl := range []string{"1s", "24h"} {
		if code, _, errs := runCLI(t, env, "token", "issue", "--user", "u_1", "--ttl", ttl); code != 0 {
			t.Errorf("--ttl %s: exit %d %s", ttl, code, errs)
		}
	}
}

// TestOverridingFlagsChecked holds a flag that overrides a configuration key
// to the key's check, as a flag: exit 2 naming the flag, its value and what
// is allowed. Before, the merged configuration's error named the file's line
// of the value the flag replaced (exit 1), and with the built-in
// configuration there was no check: edge --node of 300 bytes served, each
// decision unreadable, and --admin-listen nohost failed after the edge had
// started. The context is done, so that a command that starts stops at once.
func TestOverridingFlagsChecked(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	seed := "../../examples/seed.yaml"
	long := strings.Repeat("n", 300)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"edge", "--config", seed, "--listen", "nohost"}, `--listen "nohost": is not allowed; use host:port`},
		{[]string{"edge", "--listen", "127.0.0.1:0", "--admin-listen", "nohost"}, `--admin-listen "nohost": is not allowed; use host:port`},
		{[]string{"edge", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--node", long}, `--node "nnnn`},
		{[]string{"edge", "--config", seed, "--upstream", "ftp://x"}, `--upstream "ftp://x": is not allowed; use an absolute http or https URL`},
		{[]string{"edge", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--kinesis-stream", "no spaces"}, `--kinesis-stream "no spaces": is not allowed`},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--dashboard-listen", "nohost"}, `--dashboard-listen "nohost": is not allowed; use host:port`},
		{[]string{"serve", "--config", seed, "--listen", "127.0.0.1:99999"}, `--listen "127.0.0.1:99999": is not allowed; use host:port with a port from 0 to 65535`},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--dashboard-listen", "off", "--upstream", "ftp://x"}, `--upstream "ftp://x": is not allowed`},
		{[]string{"authz", "--config", seed, "--admin-listen", "nowhere"}, `--admin-listen "nowhere": is not allowed; use host:port`},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			dir := t.TempDir()
			args := append(c.args, "--decisions-dir", filepath.Join(dir, "log"))
			if c.args[0] == "serve" {
				args = append(args, "--state-dir", filepath.Join(dir, "state"), "--partials-dir", filepath.Join(dir, "partials"))
			}
			code, out, errs := runCLIContext(t, ctx, nil, args...)
			if code != 2 || !strings.Contains(errs, c.want) || strings.Contains(errs, "seed.yaml") {
				t.Errorf("exit %d, want 2 and %q, no seed.yaml:\n%s%s", code, c.want, out, errs)
			}
		})
	}
}

// TestListenFlags: aggregate --admin-listen and demo --dashboard-listen
// are checked as the configuration's listen addresses are, as bad flags
// (exit 2) before anything starts. Before, each exited 1 with the
// listener's error ("admin listen: listen tcp: address nohost: missing
// port in address"), aggregate after taking its state directory's lock
// and opening its sinks.
func TestListenFlags(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"aggregate", "--decisions-dir", filepath.Join(dir, "log"), "--state-dir", filepath.Join(dir, "state"), "--no-follow",
			"--partials", "dir:" + filepath.Join(dir, "partials"), "--admin-listen", "nohost"}, `--admin-listen "nohost": want host:port`},
		{[]string{"aggregate", "--decisions-dir", filepath.Join(dir, "log"), "--state-dir", filepath.Join(dir, "state"), "--no-follow",
			"--partials", "dir:" + filepath.Join(dir, "partials"), "--admin-listen", "127.0.0.1:99999"}, `--admin-listen "127.0.0.1:99999": want host:port with a port from 0 to 65535`},
		{[]string{"demo", "--dir", filepath.Join(dir, "demo"), "--dashboard-listen", "nohost"}, `--dashboard-listen "nohost": want host:port`},
	} {
		code, out, errs := runCLIContext(t, ctx, nil, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%q: exit %d, want 2 and %q:\n%s%s", c.args, code, c.want, out, errs)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "state")); err == nil {
		t.Errorf("aggregate made its state directory before refusing its flags")
	}
}

// TestEdgeAdminPortTaken: an admin address another process holds (9090 is
// also Prometheus's) stops the edge before it serves: exit 1 naming the
// admin listener, and no "edge listening". Before, the edge served
// requests from the moment it listened, then stopped on the admin error.
func TestEdgeAdminPortTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, command := range []string{"edge", "serve"} {
		dir := t.TempDir()
		args := []string{command, "--listen", "127.0.0.1:0", "--admin-listen", taken.Addr().String(), "--decisions-dir", filepath.Join(dir, "log")}
		if command == "serve" {
			args = append(args, "--dashboard-listen", "off", "--state-dir", filepath.Join(dir, "state"), "--partials-dir", filepath.Join(dir, "partials"))
		}
		code, _, errs := runCLI(t, nil, args...)
		if code != 1 || !strings.Contains(errs, "admin listen") || strings.Contains(errs, "edge listening") {
			t.Errorf("%s: exit %d, want 1, the admin listener's error and no edge listening:\n%s", command, code, errs)
		}
	}
}

// TestFailedStartLeavesNothing: edge, rls, authz and serve that cannot
// listen (their port taken) exit 1 and leave none of the directories they
// made for their decisions (and serve's state and partials), the missing
// parents included, and nothing that was there before is touched. Before,
// each left the decision log it had opened in a fresh directory.
func TestFailedStartLeavesNothing(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, command := range []string{"edge", "rls", "authz", "serve"} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "kept"), []byte("mine"), 0o644)
		args := []string{command, "--listen", taken.Addr().String(), "--admin-listen", "off", "--decisions-dir", filepath.Join(dir, "new", "log")}
		if command == "serve" {
			args = append(args, "--dashboard-listen", "off", "--state-dir", filepath.Join(dir, "state"), "--partials-dir", filepath.Join(dir, "partials"))
		}
		code, _, errs := runCLI(t, nil, args...)
		if code != 1 || !strings.Contains(errs, "address already in use") {
			t.Errorf("%s: exit %d, want 1 and the port in use:\n%s", command, code, errs)
		}
		if es, _ := os.ReadDir(dir); len(es) != 1 || es[0].Name() != "kept" {
			t.Errorf("%s: after a failed start the directory holds %v, want kept alone", command, es)
		}
	}
}
