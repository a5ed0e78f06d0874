package report

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ratewarden/ratewarden/internal/atomicfile"
)

// Scheduled makes a report on an EventBridge schedule, inside AWS Lambda:
// each scheduled event reports the Range before the event's time, less
// Lag, in whole windows, and writes it to Out (the function's stdout,
// which CloudWatch Logs keeps) and, if OutFile is set, to that file (an EFS
// mount), replaced whole. Job names the source, alerts, format and options;
// its range is set per event. It is safe for sequential use only, as
// Lambda invokes it.
type Scheduled struct {
	Job   Job
	Range time.Duration // default 24 h
	// Lag leaves the newest windows out, which the aggregator may not have
	// written yet when the schedule fires; default two windows.
	Lag     time.Duration
	Out     io.Writer
	OutFile string
}

// ScheduledResult is what an invocation returns: the range reported and
// how complete it was.
type ScheduledResult struct {
	From        time.Time `json:"from"`
	To          time.Time `json:"to"`
	Windows     int       `json:"windows"`
	WindowsRead int       `json:"windows_read"`
	Unreadable  int       `json:"unreadable"`
	Complete    bool      `json:"complete"`
	Bytes       int       `json:"bytes"`
}

// Handle makes the report of one scheduled event. Events that are not
// scheduled events are refused: a report's range comes from the
// schedule's time, and nothing else should start one.
func (s *Scheduled) Handle(ctx context.Context, ev events.CloudWatchEvent) (ScheduledResult, error) {
	if ev.DetailType != "Scheduled Event" || ev.Source != "aws.events" || ev.Time.IsZero() {
		return ScheduledResult{}, fmt.Errorf("report: event %q from %q at %v: want an EventBridge \"Scheduled Event\" from aws.events", ev.DetailType, ev.Source, ev.Time)
	}
	window := s.Job.Rollup.Window
	if window <= 0 {
		window = time.Minute
	}
	rng, lag := s.Range, s.Lag
	if rng <= 0 {
		rng = 24 * time.Hour
	}
	if lag <= 0 {
		lag = 2 * window
	}
	j := s.Job
	j.Options.To = ev.Time.Add(-lag).UTC().Truncate(window)
	j.Options.From = j.Options.To.Add(-rng)
	r, b, err := j.Run(ctx)
	if err != nil {
		return ScheduledResult{}, err
	}
	if s.OutFile != "" {
		if err := atomicfile.Write(s.OutFile, b, 0o644); err != nil {
			return ScheduledResult{}, fmt.Errorf("report: %w", err)
		}
	}
	if s.Out != nil {
		if _, err := s.Out.Write(b); err != nil {
			return ScheduledResult{}, fmt.Errorf("report: %w", err)
		}
	}
	c := r.Coverage
	return ScheduledResult{From: r.From, To: r.To, Windows: c.Windows, WindowsRead: c.Read,
		Unreadable: len(c.Unreadable), Complete: c.Complete, Bytes: len(b)}, nil
}
