package tests

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/embedded-metrics/agenttest"
)

// TestAggregateEMFAgentHung: `ratewarden aggregate --emf agent:...` with
// the CloudWatch agent hung (accepts, never reads) delivers the windows'
// partials and goes on reading; Ctrl-C then ends it within the shutdown
// grace, exit 0 (the documents not delivered are counted drops, not a
// failure of the run), with a last line saying how many documents did
// not reach the agent. It used to hang at its first flush.
func TestAggregateEMFAgentHung(t *testing.T) {
	bin := buildBinary(t)
	tmp := t.TempDir()
	// Stamped now, or CloudWatch's timestamp window refuses the documents
	// before they reach the agent.
	logDir := writeLog(t, decisiontest.NewGenerator(11, time.Now().Add(-time.Minute)).Batch(3000))
	agent := agenttest.Hung(t)
	cmd := exec.Command(bin, "aggregate", "--admin-listen", "off", "--decisions-dir", logDir, "--state-dir", filepath.Join(tmp, "state"),
		"--partials", "dir:"+filepath.Join(tmp, "partials"), "--emf", "agent:"+agent, "--window", "1s")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	delivered := make(chan struct{}, 1)
	log, logDone := scanLog(stderr, func(line string) {
		if strings.HasPrefix(line, "aggregate: events ") { // printed once a delivery is flushed
			select {
			case delivered <- struct{}{}:
			default:
			}
		}
	})
	select {
	case <-delivered:
	case <-time.After(30 * time.Second):
		t.Fatalf("no delivery was flushed in 30s with the agent hung\n%s", log())
	}
	cmd.Process.Signal(os.Interrupt)
	exited := make(chan error, 1)
	go func() { <-logDone; exited <- cmd.Wait() }()
	const grace = 30 * time.Second // aggregator.DefaultGrace; the agent's flush timeout is 5s
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) || err != nil {
			t.Errorf("aggregate exited with %v, want 0\n%s", err, log())
		}
	case <-time.After(grace):
		t.Fatalf("aggregate still runs %v after SIGINT with the agent hung\n%s", grace, log())
	}
	line := regexp.MustCompile(`(?m)^aggregate: emf agent ` + regexp.QuoteMeta(agent) + `: written \d+, not delivered [1-9]\d*( \(\d+ of them sent, not acknowledged: they may have arrived\))?, errors \d+, retries \d+$`)
	if !line.MatchString(log()) {
		t.Errorf("no line saying what the agent did not get\n%s", log())
	}
}
