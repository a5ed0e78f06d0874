package alerts_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	emf "github.com/ratewarden/ratewarden/embedded-metrics"
)

func noJitter(int64) int64 { return 0 }

// TestWebhookRetries: an endpoint that fails twice (503) then accepts gets
// the alert on the third post, as Slack-compatible JSON; one that refuses
// with 400 is not retried.
func TestWebhookRetries(t *testing.T) {
	var posts atomic.Int32
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		switch n := posts.Add(1); {
		case r.URL.Path == "/bad":
			w.WriteHeader(http.StatusBadRequest)
		case n <= 2:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	w := alerts.NewWebhook(alerts.WebhookOptions{URL: srv.URL + "/hook", Jitter: noJitter, Attempts: 5})
	a := hitter("203.0.113.7", "anonymous", t0)
	a.Summary = "203.0.113.7 made 48000 requests"
	w.Alert(context.Background(), a)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Sent != 1 || st.Retries != 2 || st.Failed != 0 || posts.Load() != 3 {
		t.Errorf("stats %+v after %d posts", st, posts.Load())
	}
	var msg struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
			Text struct{ Type, Text string }
		} `json:"blocks"`
	}
	if err := json.Unmarshal([]byte(bodies[2]), &msg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg.Text, "heavy_hitter") || !strings.Contains(msg.Text, "48000") || len(msg.Blocks) != 1 ||
		msg.Blocks[0].Text.Type != "mrkdwn" || !strings.Contains(msg.Blocks[0].Text.Text, "203.0.113.7") {
		t.Errorf("message %s", bodies[2])
	}

	posts.Store(10)
	bad := alerts.NewWebhook(alerts.WebhookOptions{URL: srv.URL + "/bad", Jitter: noJitter})
	bad.Alert(context.Background(), a)
	bad.Close(context.Background())
	if st := bad.Stats(); st.Failed != 1 || st.Retries != 0 {
		t.Errorf("a 400 gave %+v", st)
	}
}

// TestWebhookCodeSpan: the key, shown in backticks, cannot end its code
// span however it is spelled: a backtick in it is shown as U+02CB, and &,
// < and > are escaped there as everywhere else in the message.
func TestWebhookCodeSpan(t *testing.T) {
	a := hitter("user:a` <!here> & `b", "anonymous", t0)
	a.Summary = "user:a` <!here> & `b made 700 requests"
	text, block := postSlack(t, a)
	if want := "`heavy_hitter/anonymous:global/user:a\u02cb &lt;!here&gt; &amp; \u02cbb`"; !strings.Contains(block, want) {
		t.Errorf("the block does not hold the key as %s:\n%s", want, block)
	}
	if want := "user:a` &lt;!here&gt; &amp; `b made 700 requests"; !strings.Contains(text, want) {
		t.Errorf("the text does not hold the summary as %s:\n%s", want, text)
	}
	if want := "`user:a\u02cb &lt;!here&gt; &amp; \u02cbb` made 700 requests"; !strings.Contains(block, "\n"+want+"\n") {
		t.Errorf("the block does not hold the summary as %s:\n%s", want, block)
	}
}

// postSlack posts a through a webhook to a server on loopback, and returns
// the Slack message's text and its one block's. The text must be marked
// plain ("mrkdwn": false): it is what notifications show, and holds the
// summary, user ids and all, outside any code span.
func postSlack(t *testing.T, a alerts.Alert) (text, block string) {
	t.Helper()
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	w := alerts.NewWebhook(alerts.WebhookOptions{URL: srv.URL, Jitter: noJitter})
	w.Alert(context.Background(), a)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var msg struct {
		Text   string                                 `json:"text"`
		Mrkdwn *bool                                  `json:"mrkdwn"`
		Blocks []struct{ Text struct{ Text string } } `json:"blocks"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || len(msg.Blocks) != 1 || msg.Mrkdwn == nil || *msg.Mrkdwn {
		t.Fatalf("message %s (want one block, and mrkdwn false): %v", body, err)
	}
	return msg.Text, msg.Blocks[0].Text.Text
}

// TestWebhookHangDoesNotBlock: with an endpoint that never answers, the
// runner goes on window after window: alerts past the queue are dropped
// and counted, and Close gives up when its context ends.
func TestWebhookHangDoesNotBlock(t *testing.T) {
	release := make(chan struct{})
	var arrived atomic.Int32
	first := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		select {
		case first <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	hook := alerts.NewWebhook(alerts.WebhookOptions{URL: srv.URL, Queue: 1, Timeout: time.Hour, Jitter: noJitter})
	cfg := testConfig(t)
	r, err := alerts.NewRunner(alerts.RunnerOptions{Engine: alerts.Options{Config: cfg.Alerts, Window: time.Minute, Limits: alerts.RuleLimits(cfg)},
		Sinks: []alerts.Sink{hook}})
	if err != nil {
		t.Fatal(err)
	}
	// Windows of drops: each raises or keeps a drops alert; distinct
	// scrapers raise an alert each.
	for i := range 10 {
		p := aggregator.NewPartial(t0.Add(time.Duration(i)*time.Minute), time.Minute, 10)
		for j := range 700 {
			d := decisionOf(t0.Add(time.Duration(i)*time.Minute), addr(i), "anonymous:global", j)
			p.Update(&d)
		}
		if err := r.Window(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	raised := r.Stats().Total.Firing
	if raised < 5 {
		t.Fatalf("only %d alerts raised", raised)
	}
	<-first // the first post is hanging at the endpoint
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Close(ctx); err == nil {
		t.Error("Close returned no error with the endpoint hanging and its context over")
	}
	st := hook.Stats()
	if st.Dropped < raised-1 || st.Sent != 0 || arrived.Load() != 1 {
		t.Errorf("stats %+v, posts arrived %d: want drops counted, none sent, one post hanging", st, arrived.Load())
	}
}

// TestEMFAlertsValidate: the Alerts metric's documents, by type and
// severity, pass the EMF validator (what `ratewarden emf validate` runs);
// resolutions are not counted.
func TestEMFAlertsValidate(t *testing.T) {
	var buf bytes.Buffer
	w, err := emf.NewWriter(emf.WriterOptions{ValidateDocuments: true}, emf.NewStdoutSink(&buf))
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Hour)
	s := &alerts.EMF{W: w, Now: func() time.Time { return now }}
	a := hitter("203.0.113.7", "anonymous", t0.Add(30*time.Minute))
	res := a
	res.State = alerts.Resolved
	for _, x := range []alerts.Alert{a, res} {
		if err := s.Alert(context.Background(), x); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	n := 0
	for sc.Scan() {
		n++
		if v := emf.Validate(sc.Bytes(), now, emf.ValidateOptions{}); len(v) > 0 {
			t.Errorf("%s: %v", sc.Bytes(), v)
		}
		var doc struct {
			Type, Severity string
			Alerts         float64
		}
		json.Unmarshal(sc.Bytes(), &doc)
		if doc.Type != alerts.TypeHeavyHitter || doc.Severity != alerts.Critical || doc.Alerts != 1 {
			t.Errorf("document %s", sc.Bytes())
		}
	}
	if n != 1 {
		t.Errorf("%d documents, want 1 (the firing alert)", n)
	}
}
