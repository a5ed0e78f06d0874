package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ratewarden/ratewarden/internal/logevery"
)

// DefaultLogEvery is how often a Logger passes on a line of go-redis when
// NewLogger is given no interval.
const DefaultLogEvery = 10 * time.Second

// Logger routes go-redis's own log lines to slog, at most one record per
// interval: while Redis is down go-redis logs every failed dial, a line a
// request. Install it once at start-up with redis.SetLogger, which is
// global to the process. A record carries the lines suppressed since the
// one before it. It is safe for concurrent use.
type Logger struct {
	log  *slog.Logger
	gate *logevery.Gate
}

// NewLogger returns a Logger that writes to log at most one record per
// every (DefaultLogEvery if every is 0 or less).
func NewLogger(log *slog.Logger, every time.Duration) *Logger {
	if every <= 0 {
		every = DefaultLogEvery
	}
	return &Logger{log: log, gate: logevery.New(every)}
}

// Printf is go-redis's logging interface.
func (l *Logger) Printf(ctx context.Context, format string, v ...any) {
	l.Logf(ctx, time.Now(), format, v...)
}

// Logf logs a line of go-redis at now, or counts it suppressed when the
// last record was less than the interval before.
func (l *Logger) Logf(ctx context.Context, now time.Time, format string, v ...any) {
	ok, suppressed := l.gate.Allow(now)
	if !ok {
		return
	}
	l.log.LogAttrs(ctx, slog.LevelWarn, fmt.Sprintf(format, v...),
		slog.String("component", "go-redis"), slog.Uint64("suppressed", suppressed))
}
