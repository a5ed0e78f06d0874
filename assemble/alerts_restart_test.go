package assemble_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
)

// attackScenario is the traffic of the restart and replay tests: the
// background with a scraper, a login wave and a refused pro user, so that
// several detectors fire and resolve.
func attackScenario(s *sim, from, to time.Time, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	s.run(from, to, rng, background, func(sec time.Time) {
		m := int(sec.Sub(t0) / time.Minute)
		switch {
		case m >= 8 && m < 11:
			for i := range 800 {
				s.do(sec.Add(time.Duration(i)*time.Second/800), "203.0.113.7", "", "", "/")
			}
		case m >= 14 && m < 16:
			for i := range 500 {
				if (i+int(sec.Unix()))%12 == 0 {
					s.do(sec, addr(i), "", "", "/api/login")
				}
			}
		case m == 18 && sec.Second() == 0:
			for range 8 {
				s.do(sec, "192.0.2.107", "p-7", "pro", "/api/export")
			}
		}
	})
}

// TestRestartGivesTheSameAlerts: a runner stopped mid-stream and started
// again from its state directory writes exactly what one uninterrupted
// runner writes; windows given again after the restart (an aggregator
// redelivering) are skipped.
func TestRestartGivesTheSameAlerts(t *testing.T) {
	cfg := loadSimConfig(t, "")
	end := t0.Add(26 * time.Minute)

	var whole bytes.Buffer
	attackScenario(newSim(t, cfg, time.Minute, &whole, t.TempDir(), nil), t0, end, 11)

	var parts bytes.Buffer
	state := t.TempDir()
	s := newSim(t, cfg, time.Minute, &parts, state, nil)
	var outputs []aggregator.Output
	// Stop after the window of minute 15, start a new runner from the
	// state directory, and deliver the last three windows again.
	run := s.runner
	attackScenarioUntil(s, t0, end, 11, t0.Add(15*time.Minute), func(o aggregator.Output) { outputs = append(outputs, o) }, func() {
		if err := run.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.runner = newRunner(t, cfg, time.Minute, &parts, state, nil)
		for _, o := range outputs[len(outputs)-3:] {
			if err := s.runner.Write(context.Background(), "log", o); err != nil {
				t.Fatal(err)
			}
		}
	})
	if whole.Len() == 0 {
		t.Fatal("the scenario raised nothing")
	}
	if !bytes.Equal(parts.Bytes(), whole.Bytes()) {
		t.Errorf("after a restart:\n%s\nwithout:\n%s", parts.Bytes(), whole.Bytes())
	}
	if st := s.runner.Stats().Run; st.Skipped != 3 {
		t.Errorf("skipped %d windows given again, want 3", st.Skipped)
	}
}

// attackScenarioUntil is attackScenario with a hook: every output is
// also given to keep, and restart runs once the rollup has closed a
// window starting at or after at.
func attackScenarioUntil(s *sim, from, to time.Time, seed uint64, at time.Time, keep func(aggregator.Output), restart func()) {
	s.keep = keep
	s.restartAt, s.restart = at, restart
	attackScenario(s, from, to, seed)
}

// TestReplayGivesTheSameAlerts: the same traffic gives byte-identical
// alert files, and the partials it stored, read back by Follow (what
// `ratewarden alerts --partials` runs), give them again.
func TestReplayGivesTheSameAlerts(t *testing.T) {
	cfg := loadSimConfig(t, "")
	end := t0.Add(26 * time.Minute)
	var first, second, followed bytes.Buffer
	dir := &aggregator.PartialsDir{Dir: filepath.Join(t.TempDir(), "partials")}
	s := newSim(t, cfg, time.Minute, &first, "", nil)
	s.partials = dir
	attackScenario(s, t0, end, 21)
	attackScenario(newSim(t, cfg, time.Minute, &second, "", nil), t0, end, 21)
	if first.Len() == 0 {
		t.Fatal("the scenario raised nothing")
	}
	if !bytes.Equal(first.Bytes(), second.Bytes()) {
		t.Errorf("two runs differ:\n%s\n%s", first.Bytes(), second.Bytes())
	}
	r := newRunner(t, cfg, time.Minute, &followed, t.TempDir(), nil)
	if err := r.Follow(context.Background(), alerts.FollowOptions{Partials: dir}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(followed.Bytes(), first.Bytes()) {
		t.Errorf("from the partials:\n%s\nlive:\n%s", followed.Bytes(), first.Bytes())
	}
	// Following again finds nothing new.
	before := followed.Len()
	if err := r.Follow(context.Background(), alerts.FollowOptions{Partials: dir}); err != nil {
		t.Fatal(err)
	}
	if followed.Len() != before {
		t.Error("a second pass over the same partials raised alerts again")
	}
}
