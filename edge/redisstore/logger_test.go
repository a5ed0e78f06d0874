package redisstore_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/edge/redisstore"
)

// TestLoggerRateLimits logs a line every 100 ms for 25 s through a Logger
// of one record per 10 s: three records, each after the first carrying
// the lines suppressed since the one before.
func TestLoggerRateLimits(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	l := redisstore.NewLogger(log, 10*time.Second)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 250 {
		l.Logf(context.Background(), start.Add(time.Duration(i)*100*time.Millisecond), "redis: connection pool: failed to dial after %d attempts: %v", 5, "connection refused")
	}
	line := `level=WARN msg="redis: connection pool: failed to dial after 5 attempts: connection refused" component=go-redis suppressed=`
	want := line + "0\n" + line + "99\n" + line + "99\n"
	if got := buf.String(); got != want {
		t.Errorf("records:\n%s\nwant:\n%s", got, want)
	}
}
