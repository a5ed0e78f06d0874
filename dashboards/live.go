package dashboards

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/internal/loopback"
)

//go:embed web
var webFS embed.FS

// ListEntry is one entry of a feedback list as the dashboard shows it:
// the fields of edge/lists.Entry.
type ListEntry struct {
	List    string    `json:"list"`
	Target  string    `json:"target"`
	Expires time.Time `json:"expires,omitzero"`
	Reason  string    `json:"reason,omitempty"`
	By      string    `json:"by,omitempty"`
	Added   time.Time `json:"added,omitzero"`
	Pending bool      `json:"pending,omitempty"`
}

// ListSource is where the dashboard reads the feedback lists from.
type ListSource interface {
	Entries(ctx context.Context) ([]ListEntry, error)
}

// LiveOptions configure the live dashboard's handler. Index is required.
type LiveOptions struct {
	Index *Index
	// Token, when set, is the bearer token every API call must present.
	Token string
	// Run returns the aggregator's latest progress report; nil or false
	// when there is none yet.
	Run func() (aggregator.RunStats, bool)
	// AlertsFile holds alert and action records as JSON lines
	// (aggregator/alerts); "" shows an empty timeline.
	AlertsFile string
	Lists      ListSource       // nil shows no lists
	Now        func() time.Time // default time.Now
	// Metrics, if set, is served at /metrics behind the same token as the
	// API (the aggregator's Prometheus metrics).
	Metrics http.Handler
}

// maxAlertBytes bounds how much of the end of the alerts file is read.
const maxAlertBytes = 4 << 20

// maxAlerts bounds the alert and action records returned, the latest.
const maxAlerts = 500

// Live returns the live dashboard: the page and its assets (embedded, no
// data in them) and the JSON API it polls:
//
//	GET /api/summary?from&to|last     totals, tiers, rules, offenders, latency, pipeline
//	GET /api/series?from&to|last&points  the same over time, downsampled to points buckets
//	GET /api/alerts                    the latest alert and action records
//	GET /api/lists                     the feedback lists' entries
//	GET /metrics                       o.Metrics, when set
//
// from and to are RFC 3339 times or Unix milliseconds; last is a duration
// ending at the newest window (default: every window held). With a Token
// every /api call needs "Authorization: Bearer <token>"; without one, only
// requests addressed to a loopback host are answered (a page elsewhere
// cannot read the API through DNS rebinding).
func Live(o LiveOptions) http.Handler {
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &live{o: o}
	if o.Token != "" {
		sum := sha256.Sum256([]byte(o.Token))
		l.tokenSum = sum[:]
	}
	static, err := fs.Sub(webFS, "web")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	mux := http.NewServeMux()
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServer(http.FS(static))))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, static, "index.html")
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.Handle("GET /api/summary", l.tokenOnly(l.api(l.summary)))
	mux.Handle("GET /api/series", l.tokenOnly(l.api(l.series)))
	mux.Handle("GET /api/alerts", l.tokenOnly(l.api(l.alerts)))
	mux.Handle("GET /api/lists", l.tokenOnly(l.api(l.lists)))
	if o.Metrics != nil {
		mux.Handle("GET /metrics", l.tokenOnly(o.Metrics))
	}
	return l.guard(mux)
}

type live struct {
	o        LiveOptions
	tokenSum []byte
}

// guard sets the headers every answer carries and refuses requests for
// another host when no token protects the API.
func (l *live) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		if l.tokenSum == nil && !loopback.Host(r.Host) {
			http.Error(w, "this dashboard answers only to a loopback host name (127.0.0.1, [::1], localhost) unless it has a token", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authorized reports whether r presents the token: the hashes are compared
// in constant time, so neither the token nor its length leaks through
// timing.
func (l *live) authorized(r *http.Request) bool {
	if l.tokenSum == nil {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], l.tokenSum) == 1 && ok
}

// tokenOnly serves h to requests that present the token.
func (l *live) tokenOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !l.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ratewarden dashboard"`)
			http.Error(w, "a bearer token is required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// badRequest is an error the caller made.
type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

// api wraps an endpoint: the token, no caching, JSON out, and a 400 with
// the reason for a bad parameter.
func (l *live) api(f func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		v, err := f(r)
		var bad badRequest
		switch {
		case errors.As(err, &bad):
			http.Error(w, bad.msg, http.StatusBadRequest)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h.Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.Encode(v)
	}
}

// parseTime reads an RFC 3339 time or Unix milliseconds.
func parseTime(name, s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, badRequest{fmt.Sprintf("%s %q: want an RFC 3339 time or Unix milliseconds", name, s)}
	}
	return t, nil
}

// timeRange reads from, to and last; without them it is every window
// held.
func (l *live) timeRange(r *http.Request) (from, to time.Time, err error) {
	q := r.URL.Query()
	oldest, newest, ok := l.o.Index.Bounds()
	if !ok {
		newest = l.o.Now().UTC().Truncate(l.o.Index.Window()).Add(l.o.Index.Window())
		oldest = newest
	}
	from, to = oldest, newest
	if s := q.Get("last"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > maxRange {
			return from, to, badRequest{fmt.Sprintf("last %q: want a duration such as 15m or 24h, at most %dh (%d days)", s, maxRange/time.Hour, maxRange/(24*time.Hour))}
		}
		from = newest.Add(-d)
	}
	if s := q.Get("from"); s != "" {
		if from, err = parseTime("from", s); err != nil {
			return from, to, err
		}
	}
	if s := q.Get("to"); s != "" {
		if to, err = parseTime("to", s); err != nil {
			return from, to, err
		}
	}
	if to.Before(from) {
		return from, to, badRequest{"to is before from"}
	}
	for _, t := range []struct {
		name string
		t    time.Time
	}{{"from", from}, {"to", to}} {
		if t.t.Before(minTime) || t.t.After(maxTime) {
			return from, to, badRequest{fmt.Sprintf("%s %s: want a time from 1970 to 2200", t.name, t.t.Format(time.RFC3339))}
		}
	}
	if to.Sub(from) > maxRange {
		return from, to, badRequest{fmt.Sprintf("from %s and to %s are more than %d days apart; want a range of at most %d days",
			from.Format(time.RFC3339), to.Format(time.RFC3339), maxRange/(24*time.Hour), maxRange/(24*time.Hour))}
	}
	return from, to, nil
}

// The times a range may name: Unix nanoseconds hold them.
var (
	minTime = time.Unix(0, 0)
	maxTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// maxRange is the widest range the API reads (from to to, or last): a
// leap year, far more than an index holds (serve.dashboard.retain, at
// most 7 days).
const maxRange = 366 * 24 * time.Hour

// Pipeline is the aggregator's progress as the dashboard shows it.
type Pipeline struct {
	Running       bool      `json:"running"`
	Watermark     time.Time `json:"watermark,omitzero"`
	LagSeconds    float64   `json:"lag_seconds"`
	Events        uint64    `json:"events"`
	Late          uint64    `json:"late"`
	LateDropped   uint64    `json:"late_dropped"`
	CorruptEvents uint64    `json:"corrupt_events"`
	Windows       uint64    `json:"windows"`
	Outputs       uint64    `json:"outputs"`
}

type summaryAnswer struct {
	Totals
	Pipeline Pipeline `json:"pipeline"`
}

func (l *live) summary(r *http.Request) (any, error) {
	from, to, err := l.timeRange(r)
	if err != nil {
		return nil, err
	}
	a := summaryAnswer{Totals: l.o.Index.Totals(from, to)}
	if l.o.Run != nil {
		if s, ok := l.o.Run(); ok {
			a.Pipeline = Pipeline{Running: true, Watermark: s.Watermark, Events: s.Rollup.Events, Late: s.Rollup.Late,
				LateDropped: s.Rollup.LateDropped, CorruptEvents: s.Read.BadEvents, Windows: s.Rollup.Windows, Outputs: s.Outputs}
			if !s.Watermark.IsZero() {
				a.Pipeline.LagSeconds = max(0, l.o.Now().Sub(s.Watermark).Seconds())
			}
		}
	}
	return a, nil
}

// maxPoints bounds the buckets of a series.
const maxPoints = 2000

func (l *live) series(r *http.Request) (any, error) {
	from, to, err := l.timeRange(r)
	if err != nil {
		return nil, err
	}
	points := 300
	if s := r.URL.Query().Get("points"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPoints {
			return nil, badRequest{fmt.Sprintf("points %q: want 1 to %d", s, maxPoints)}
		}
		points = n
	}
	return l.o.Index.Series(from, to, points), nil
}

// Record is one line of the alerts file: an alert or an action.
type Record struct {
	Alert  *alerts.Alert  `json:"alert,omitempty"`
	Action *alerts.Action `json:"action,omitempty"`
}

type alertsAnswer struct {
	Configured bool     `json:"configured"`
	Records    []Record `json:"records"`
	Skipped    int      `json:"skipped"` // lines that were neither
	Truncated  bool     `json:"truncated"`
}

func (l *live) alerts(*http.Request) (any, error) {
	a := alertsAnswer{Records: []Record{}}
	if l.o.AlertsFile == "" {
		return a, nil
	}
	a.Configured = true
	recs, skipped, truncated, err := ReadAlerts(l.o.AlertsFile, maxAlertBytes, maxAlerts)
	if errors.Is(err, os.ErrNotExist) {
		return a, nil // nothing raised yet
	}
	a.Records, a.Skipped, a.Truncated = recs, skipped, truncated
	return a, err
}

// ReadAlerts reads the alert and action records of the last maxBytes of
// the JSON-lines file path, keeping the last n; lines that are neither are
// counted in skipped.
func ReadAlerts(path string, maxBytes int64, n int) (recs []Record, skipped int, truncated bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, false, err
	}
	var r io.Reader = f
	if st.Size() > maxBytes {
		if _, err := f.Seek(st.Size()-maxBytes, io.SeekStart); err != nil {
			return nil, 0, false, err
		}
		br := bufio.NewReader(f)
		br.ReadString('\n') // a partial first line
		r, truncated = br, true
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	recs = []Record{}
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var kind struct{ Kind string }
		if json.Unmarshal(line, &kind) != nil {
			skipped++
			continue
		}
		var rec Record
		var derr error
		switch kind.Kind {
		case "alert":
			rec.Alert = new(alerts.Alert)
			derr = json.Unmarshal(line, rec.Alert)
		case "action":
			rec.Action = new(alerts.Action)
			derr = json.Unmarshal(line, rec.Action)
		default:
			derr = errors.New("unknown kind")
		}
		if derr != nil {
			skipped++
			continue
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return recs, skipped, truncated, fmt.Errorf("read alerts %s: %w", path, err)
	}
	if len(recs) > n {
		recs, truncated = recs[len(recs)-n:], true
	}
	return recs, skipped, truncated, nil
}

type listsAnswer struct {
	Configured bool        `json:"configured"`
	Entries    []ListEntry `json:"entries"`
}

func (l *live) lists(r *http.Request) (any, error) {
	a := listsAnswer{Entries: []ListEntry{}}
	if l.o.Lists == nil {
		return a, nil
	}
	a.Configured = true
	es, err := l.o.Lists.Entries(r.Context())
	if err != nil {
		return nil, fmt.Errorf("read lists: %w", err)
	}
	if es != nil {
		a.Entries = es
	}
	return a, nil
}

// CheckListen refuses to serve the dashboard on addr when it is not a
// loopback address and no token protects it, unless allowRemote: an
// address of all interfaces (":9092", "0.0.0.0:9092") is not loopback.
func CheckListen(addr string, token bool, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("dashboard listen %q: want host:port", addr)
	}
	if token || allowRemote || loopback.Host(host) {
		return nil
	}
	return fmt.Errorf("dashboard listen %q: not a loopback address, and no token protects the dashboard: set the token's environment variable (serve.dashboard.token_env), listen on 127.0.0.1, or set serve.dashboard.allow_remote", addr)
}
