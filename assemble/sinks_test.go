package assemble_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
)

// blackhole returns the address of a listener that accepts connections
// and never answers.
func blackhole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return ln.Addr().String()
}

// TestSinksCloseAgainstAHungStream: the Kinesis endpoint accepts and never
// answers. Close, given two seconds, flushes the log at once and, rather
// than lose the Kinesis lane's decisions when the time is up, cuts the
// stream's calls short halfway and spills them.
func TestSinksCloseAgainstAHungStream(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL_KINESIS", "http://"+blackhole(t))
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	dir := t.TempDir()
	cfg := loadConfig(t, `
edge:
  upstream: ORIGIN
decisions:
  dir: `+filepath.Join(dir, "log")+`
  linger: 1ms
  kinesis:
    stream: decisions
    spill_dir: `+filepath.Join(dir, "spill")+`
    linger: 1ms
`+anonymous)
	s, err := assemble.DecisionSinks(context.Background(), cfg, slog.New(slog.DiscardHandler), os.Getenv, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	for range n {
		s.Emitter.Emit(decisions.Decision{Kind: decisions.KindDecision, Time: time.Now(), Outcome: decisions.Allow})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if st := s.Spill.Stats(); st.Spilled != n {
		t.Errorf("spill %+v, want the %d decisions spilled", st, n)
	}
	rd, err := decisionlog.Open(filepath.Join(dir, "log"), decisionlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got := 0
	for ; ; got++ {
		if _, _, err := rd.Next(context.Background(), false); err != nil {
			break
		}
	}
	if got != n {
		t.Errorf("log holds %d decisions, want %d", got, n)
	}
}
