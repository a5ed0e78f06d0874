package alerts

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	emf "github.com/ratewarden/ratewarden/embedded-metrics"
	"github.com/ratewarden/ratewarden/internal/backoff"
	"github.com/ratewarden/ratewarden/internal/visible"
)

// Sink receives alerts. A sink that sends them away must not block: it
// queues, and drops and counts what does not fit. Close flushes what it
// holds and stops its goroutines, within ctx.
type Sink interface {
	Alert(ctx context.Context, a Alert) error
	Close(ctx context.Context) error
}

// ActionLog records feedback actions.
type ActionLog interface {
	Action(ctx context.Context, a Action) error
}

// JSONLines writes alerts and actions as JSON objects, one per line, to a
// writer (a file opened for appending, or standard output), with the
// format characters a user id may hold as \u escapes (visible.AppendJSON):
// people read these lines on a terminal, where "ad\u200bmin" would read
// "admin". It is safe for concurrent use.
type JSONLines struct {
	mu sync.Mutex
	w  io.Writer
	c  io.Closer // nil: not closed by Close
}

var (
	_ Sink      = (*JSONLines)(nil)
	_ ActionLog = (*JSONLines)(nil)
)

// NewJSONLines writes to w; Close closes c if not nil.
func NewJSONLines(w io.Writer, c io.Closer) *JSONLines { return &JSONLines{w: w, c: c} }

func (j *JSONLines) write(v any) error {
	js, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("write alert: %w", err)
	}
	b := append(visible.AppendJSON(make([]byte, 0, len(js)+1), js), '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.w.Write(b); err != nil {
		return fmt.Errorf("write alert: %w", err)
	}
	return nil
}

// Alert writes a.
func (j *JSONLines) Alert(_ context.Context, a Alert) error { return j.write(a) }

// Action writes a.
func (j *JSONLines) Action(_ context.Context, a Action) error { return j.write(a) }

// Close closes the file, if it has one.
func (j *JSONLines) Close(context.Context) error {
	if j.c == nil {
		return nil
	}
	return j.c.Close()
}

// WebhookOptions configure a Webhook.
type WebhookOptions struct {
	URL      string
	Client   *http.Client  // default: a client with no timeout of its own (each post has Timeout)
	Queue    int           // alerts waiting; default 256
	Timeout  time.Duration // of one post; default 5s
	Attempts int           // posts of one alert before it is dropped; default 5
	Backoff  time.Duration // first wait between attempts, doubling with full jitter; default 500ms
	MaxDelay time.Duration // default 30s
	// Jitter draws the backoff's random part (backoff.FullJitter); default
	// backoff.Uniform.
	Jitter func(n int64) int64
}

// WebhookStats count what a Webhook did.
type WebhookStats struct {
	Sent    uint64 // alerts the endpoint accepted (2xx)
	Retries uint64 // posts tried again
	Failed  uint64 // alerts given up after every attempt, or refused with a 4xx
	Dropped uint64 // alerts dropped because the queue was full
}

// Webhook posts alerts as Slack-compatible JSON ({"text": ..., "blocks":
// [...]}) from a goroutine of its own, retrying failures (network errors,
// 429 and 5xx) with backoff. Alert never blocks: a full queue drops and
// counts. It is safe for concurrent use; Close stops it.
type Webhook struct {
	o                              WebhookOptions
	queue                          chan Alert
	done                           chan struct{}
	stop                           context.CancelFunc
	ctx                            context.Context
	sent, retries, failed, dropped atomic.Uint64
	closeOnce                      sync.Once
}

var _ Sink = (*Webhook)(nil)

// NewWebhook starts a Webhook.
func NewWebhook(o WebhookOptions) *Webhook {
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.Queue <= 0 {
		o.Queue = 256
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
	if o.Backoff <= 0 {
		o.Backoff = 500 * time.Millisecond
	}
	if o.MaxDelay < o.Backoff {
		o.MaxDelay = max(30*time.Second, o.Backoff)
	}
	if o.Jitter == nil {
		o.Jitter = backoff.Uniform
	}
	ctx, stop := context.WithCancel(context.Background())
	w := &Webhook{o: o, queue: make(chan Alert, o.Queue), done: make(chan struct{}), ctx: ctx, stop: stop}
	go w.run()
	return w
}

// Alert queues a, or drops and counts it when the queue is full.
func (w *Webhook) Alert(_ context.Context, a Alert) error {
	select {
	case w.queue <- a:
	default:
		w.dropped.Add(1)
	}
	return nil
}

// Stats returns the counts so far.
func (w *Webhook) Stats() WebhookStats {
	return WebhookStats{Sent: w.sent.Load(), Retries: w.retries.Load(), Failed: w.failed.Load(), Dropped: w.dropped.Load()}
}

// Close stops taking alerts and waits for the queue to be posted; when ctx
// ends first, the post under way is cut short and what is left is counted
// as dropped.
func (w *Webhook) Close(ctx context.Context) error {
	w.closeOnce.Do(func() { close(w.queue) })
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		w.stop()
		<-w.done
		return ctx.Err()
	}
}

func (w *Webhook) run() {
	defer close(w.done)
	defer w.stop()
	for a := range w.queue {
		if w.ctx.Err() != nil {
			w.dropped.Add(1)
			continue
		}
		w.deliver(a)
	}
}

// deliver posts a until it is accepted, refused, or out of attempts.
func (w *Webhook) deliver(a Alert) {
	body, err := json.Marshal(slackMessage(a))
	if err != nil {
		w.failed.Add(1)
		return
	}
	for attempt := 1; ; attempt++ {
		retry, err := w.post(body)
		if err == nil {
			w.sent.Add(1)
			return
		}
		if !retry || attempt >= w.o.Attempts {
			w.failed.Add(1)
			return
		}
		w.retries.Add(1)
		if backoff.Sleep(w.ctx, backoff.FullJitter(w.o.Backoff, w.o.MaxDelay, attempt, w.o.Jitter)) != nil {
			w.dropped.Add(1)
			return
		}
	}
}

// post sends body once; retry says whether a failure may be tried again.
func (w *Webhook) post(body []byte) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(w.ctx, w.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.o.URL, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.o.Client.Do(req)
	if err != nil {
		return true, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return true, errors.New(resp.Status)
	}
	return false, errors.New(resp.Status)
}

// slack is a Slack incoming-webhook message: text, and blocks for clients
// that render them. Text is what notifications show; Mrkdwn false has Slack
// show it as plain text, not read it as mrkdwn (Slack's message payload
// reference: mrkdwn "determines whether the text field is rendered
// according to mrkdwn formatting or not. Defaults to true"), so that no
// user id in it is set in bold, italics or strike-through. It does not
// reach the blocks, each of which says its own type.
type slack struct {
	Text   string       `json:"text"`
	Mrkdwn bool         `json:"mrkdwn"`
	Blocks []slackBlock `json:"blocks,omitempty"`
}

type slackBlock struct {
	Type string    `json:"type"`
	Text slackText `json:"text"`
}

type slackText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// slackMessage is a's message. Every value taken from a is shown as
// slackShown writes it, with each identity of a in it cut to maxShownID
// characters, and goes through slackEscape; in the mrkdwn block every
// identity (a user id is the client's choice) is a code span (slackCode):
// it must reach the channel as text on the line it belongs to, not as a
// mention, a link, bold, italics, strike-through, the start or end of a
// code span, a line of its own or text read in another order.
func slackMessage(a Alert) slack {
	ids := slackIdentities(a)
	cut := ids.replacer(func(id string) string { return id })
	show := func(s string) string { return cut.Replace(slackShown(s, 0)) }
	typ, state := slackEscape(show(a.Type)), slackEscape(show(a.State))
	head := fmt.Sprintf("[%s] %s %s: %s", slackEscape(show(strings.ToUpper(a.Severity))), typ, state, slackEscape(show(a.Summary)))
	var b strings.Builder
	fmt.Fprintf(&b, "*%s* %s %s\n%s\nwindow %s – %s", typ, slackCode(show(a.Key)), state,
		ids.replacer(slackCode, slackEscapes...).Replace(slackShown(a.Summary, 0)),
		a.WindowStart.UTC().Format(time.RFC3339), a.WindowEnd.UTC().Format(time.RFC3339))
	sep := "\ntop identities: "
	for _, id := range a.Identities {
		b.WriteString(sep)
		b.WriteString(slackCode(slackShown(id, maxShownID)))
		sep = ", "
	}
	return slack{Text: head, Blocks: []slackBlock{{Type: "section", Text: slackText{Type: "mrkdwn", Text: b.String()}}}}
}

// slackIDs are an alert's identities, each as it stands in the alert's
// values once they are shown (slackShown, in full) and as the message
// shows it (cut to maxShownID), the longest first.
type slackIDs []slackID

type slackID struct{ full, cut string }

// slackIdentities returns a's identities but the empty one.
func slackIdentities(a Alert) slackIDs {
	var ids slackIDs
	for _, id := range a.Identities {
		if id != "" {
			ids = append(ids, slackID{full: slackShown(id, 0), cut: slackShown(id, maxShownID)})
		}
	}
	slices.SortStableFunc(ids, func(x, y slackID) int { return cmp.Compare(len(y.full), len(x.full)) })
	return ids
}

// replacer returns a replacer of each identity as shown in full by as
// applied to its cut form, and of escapes' pairs of old and new. A
// detector may put an identity anywhere in a summary or key (a heavy
// hitter's leads its summary), so each is looked for rather than its
// place assumed. It is one pass, the longest identity first, so that an
// identity that holds another is replaced whole, and what replaces it is
// not looked at again.
func (ids slackIDs) replacer(as func(string) string, escapes ...string) *strings.Replacer {
	pairs := make([]string, 0, 2*len(ids)+len(escapes))
	for _, id := range ids {
		pairs = append(pairs, id.full, as(id.cut))
	}
	return strings.NewReplacer(append(pairs, escapes...)...)
}

// maxShownID is the most characters of an identity a Slack message shows:
// every address whole, and enough of a user id to tell it from others,
// while ten of them leave room in a section block, whose text Slack
// refuses past 3000 characters (and with it the alert).
const maxShownID = 128

// slackShown returns s as a Slack message shows it: as visible.Escape
// writes it (each character that is not drawn but acts on the text around
// it, each byte that is not UTF-8, U+FFFD and the backslash as an escape:
// \n, \u202e, \x00, \ufffd, \\), so that s can neither start a line nor
// reorder or hide text, and no two strings are shown alike in full. With
// limit > 0, what is shown past limit characters is cut: it ends with "…"
// and the length of s. &, < and > count as the escapes the message holds
// them as (slackEscape), so that the limit bounds what is posted.
func slackShown(s string, limit int) string {
	var b strings.Builder
	n := 0
	for c := range visible.Chars(s) {
		if n += utf8.RuneCountInString(slackEscape(c)); limit > 0 && n > limit {
			b.WriteString("… (cut from ")
			b.WriteString(strconv.Itoa(len(s)))
			b.WriteString(" bytes)")
			break
		}
		b.WriteString(c)
	}
	return b.String()
}

// slackEscapes are the three characters Slack reads as markup in a
// message's text, each with its escape: & starts an entity, and < and >
// enclose a mention (<!channel>, <@U123>) or a link with a label of its
// own (<url|label>). Slack asks senders to escape them, and decodes them
// again for display.
var slackEscapes = []string{"&", "&amp;", "<", "&lt;", ">", "&gt;"}

var slackEscaper = strings.NewReplacer(slackEscapes...)

// slackEscape returns s as plain text in a Slack message.
func slackEscape(s string) string { return slackEscaper.Replace(s) }

// slackCode returns s as a code span in a mrkdwn text: in backticks, where
// Slack reads no *, _ or ~ as formatting. Slack has no way to escape a
// backtick there: one would end the span early and let the rest be read as
// markup, so it becomes U+02CB (ˋ), which looks alike and does not.
func slackCode(s string) string {
	return "`" + strings.ReplaceAll(slackEscape(s), "`", "\u02cb") + "`"
}

// Names of the EMF metric and dimensions of alerts.
const (
	MetricAlerts = "Alerts"
	DimType      = "Type"
	DimSeverity  = "Severity"
)

// EMF writes the metric Alerts (a count of 1 per alert raised) by type
// and severity through an emf.Writer, stamped with the alert's time.
// Resolutions are not counted. It is safe for concurrent use.
type EMF struct {
	W         *emf.Writer
	Namespace string // default "Ratewarden", the aggregator's
	// Now is when CloudWatch reads the documents (the timestamp check);
	// default time.Now.
	Now func() time.Time
}

var _ Sink = (*EMF)(nil)

// Document returns the EMF document of a raised alert.
func (s *EMF) Document(a Alert) emf.Document {
	ns := s.Namespace
	if ns == "" {
		ns = "Ratewarden"
	}
	return emf.Document{Namespace: ns, Timestamp: a.Time,
		Dimensions: [][]emf.Dimension{{{Name: DimType, Value: a.Type}, {Name: DimSeverity, Value: a.Severity}}},
		Properties: []emf.Property{emf.StringProperty("rw_alert_key", a.Key)},
		Metrics:    []emf.Metric{{Name: MetricAlerts, Unit: emf.Count, Values: []float64{1}}}}
}

// Alert writes a's document when a is firing. A document the
// specification refuses is counted by the writer and not returned as an
// error: a retry would be refused again.
func (s *EMF) Alert(ctx context.Context, a Alert) error {
	if a.State != Firing {
		return nil
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	d := s.Document(a)
	if err := s.W.Write(ctx, &d, now()); err != nil {
		var inv *emf.InvalidError
		if errors.As(err, &inv) {
			return nil
		}
		return fmt.Errorf("write alert metric: %w", err)
	}
	return nil
}

// Close flushes the writer; its owner closes it.
func (s *EMF) Close(ctx context.Context) error { return s.W.Flush(ctx) }
