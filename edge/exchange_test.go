package edge

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
)

// proxied is an edge (limiter and reverse proxy) on loopback in front of
// the origin at originURL, with cfg edited by edit.
type proxied struct {
	url  string
	lim  *Limiter
	sink *recordSink
	log  *bytes.Buffer
	srv  *httptest.Server
}

func newProxied(t *testing.T, originURL string, edit func(*config.Config)) *proxied {
	t.Helper()
	cfg := seedConfig(t, edit)
	u, err := url.Parse(originURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxied{sink: &recordSink{}, log: &bytes.Buffer{}}
	p.lim = newLimiter(t, cfg, Options{Sink: p.sink, Log: slog.New(slog.NewTextHandler(p.log, nil))})
	p.srv = httptest.NewServer(p.lim.Middleware(NewReverseProxy(u, cfg.Edge.Origin)))
	t.Cleanup(p.srv.Close)
	p.url = p.srv.URL
	return p
}

// TestOriginFailuresRecorded checks that what the origin did reaches the
// client, the decision, the metrics and the log: a dead origin (502), one
// that does not answer in time (504), one that breaks off its body, one
// that stalls mid-body.
func TestOriginFailuresRecorded(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String()
	dead.Close()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly five")
		buf.Flush()
		c.Close()
	}))
	t.Cleanup(broken.Close)
	stalled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, "only five")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(stalled.Close)

	const headerTimeout, readTimeout = 200 * time.Millisecond, 200 * time.Millisecond
	for _, c := range []struct {
		name, origin string
		status       int
		respErr      string
		minLatency   time.Duration
	}{
		{"dead origin", deadURL, 502, decisions.UpstreamUnreachable, 0},
		{"slow origin", slow.URL, 504, decisions.UpstreamTimeout, headerTimeout},
		{"broken body", broken.URL, 200, decisions.UpstreamFailed, 0},
		{"stalled body", stalled.URL, 200, decisions.UpstreamReadTimeout, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newProxied(t, c.origin, func(cfg *config.Config) {
				cfg.Edge.Origin.ResponseHeaderTimeout, cfg.Edge.Origin.ReadTimeout = headerTimeout, readTimeout
			})
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(p.url + "/api/search")
			switch {
			case c.respErr == decisions.UpstreamFailed || c.respErr == decisions.UpstreamReadTimeout:
				// The edge aborts the response: the client gets a
				// truncated one or, as its headers were still buffered,
				// none at all.
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				var ne net.Error
				if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
					t.Errorf("the client got a whole response, or was not cut off: %v", err)
				}
			case err != nil:
				t.Fatal(err)
			default:
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != c.status {
					t.Errorf("status %d, want %d", resp.StatusCode, c.status)
				}
			}
			ds := p.sink.waitFor(t, 1)
			d := ds[0]
			if len(ds) != 1 || d.Status != c.status || d.ResponseError != c.respErr || d.Outcome != decisions.Allow {
				t.Errorf("decision: %d decisions, status %d, response error %q, outcome %v; want status %d, %q",
					len(ds), d.Status, d.ResponseError, d.Outcome, c.status, c.respErr)
			}
			if d.UpstreamLatency <= c.minLatency || d.UpstreamLatency > 5*time.Second {
				t.Errorf("upstream latency %v, want more than %v", d.UpstreamLatency, c.minLatency)
			}
			if got := p.lim.Stats().ResponseErrors[c.respErr]; got != 1 {
				t.Errorf("response errors %q counted %d, want 1", c.respErr, got)
			}
			if log := p.log.String(); !strings.Contains(log, "error="+c.respErr) || !strings.Contains(log, "rule=anonymous:/api/search") {
				t.Errorf("log: %s", log)
			}
		})
	}
}

// TestOriginResponse records a healthy origin's status and latency.
func TestOriginResponse(t *testing.T) {
	// The origin reads the request's body before it answers, as a healthy
	// one does: one that answers first has an upstream latency of 0 (its
	// response began before the body was sent). It then takes 20ms, so
	// that the proxy's own read of the body's end (in the transport's
	// writer, which a loaded machine may run a few milliseconds late)
	// comes before the response, as it does on a machine at rest.
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(20 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "made")
	}))
	t.Cleanup(origin.Close)
	p := newProxied(t, origin.URL, nil)
	resp, err := http.Post(p.url+"/api/search", "text/plain", strings.NewReader("some body"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := p.sink.waitFor(t, 1)[0]
	if d.Status != 201 || d.ResponseError != "" || d.UpstreamLatency <= 0 || d.UpstreamLatency > 5*time.Second {
		t.Errorf("decision: status %d, response error %q, upstream latency %v", d.Status, d.ResponseError, d.UpstreamLatency)
	}
}

// rawRequest writes req on a new connection to addr and returns the
// status line of the response, within 10 s.
func rawRequest(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("read the response: %v", err)
	}
	return strings.TrimSpace(line)
}

// TestSlowBody sends a body that never ends: the edge answers 408 once
// edge.client.body_timeout has passed, and records it. A body that does
// arrive in time is not cut off later, however long the origin takes.
func TestSlowBody(t *testing.T) {
	const bodyTimeout = 150 * time.Millisecond
	got := make(chan string, 4)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if r.URL.Query().Has("slow") {
			// A slow answer after the whole body: the deadline must be
			// gone by now.
			<-time.After(2 * bodyTimeout)
		}
		got <- string(b)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(origin.Close)
	p := newProxied(t, origin.URL, func(c *config.Config) { c.Edge.Client.BodyTimeout = bodyTimeout })

	start := time.Now()
	status := rawRequest(t, p.url, "POST /api/search HTTP/1.1\r\nHost: edge\r\nContent-Length: 100\r\n\r\na")
	if status != "HTTP/1.1 408 Request Timeout" {
		t.Errorf("slow body: %q, want 408", status)
	}
	if took := time.Since(start); took < bodyTimeout || took > bodyTimeout+5*time.Second {
		t.Errorf("answered after %v, want about %v", took, bodyTimeout)
	}
	d := p.sink.waitFor(t, 1)[0]
	if d.Status != 408 || d.ResponseError != decisions.BodyTimeout || d.UpstreamLatency != 0 {
		t.Errorf("decision: status %d, response error %q, upstream latency %v", d.Status, d.ResponseError, d.UpstreamLatency)
	}
	if got := p.lim.Stats().ResponseErrors[decisions.BodyTimeout]; got != 1 {
		t.Errorf("body timeouts counted %d", got)
	}

	resp, err := http.Post(p.url+"/api/search?slow", "text/plain", strings.NewReader("whole body"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || <-got != "whole body" {
		t.Errorf("a body in time, a slow origin: %d", resp.StatusCode)
	}
	// The origin answered 2×bodyTimeout after the body: past the body's
	// deadline. The edge counts from the end of the client's body, which
	// the origin may have read a moment before the edge noted it (it
	// measured 297.6 ms once), so more than bodyTimeout is what shows the
	// deadline did not cut the exchange.
	if d := p.sink.waitFor(t, 2)[1]; d.Status != 200 || d.ResponseError != "" || d.UpstreamLatency <= bodyTimeout {
		t.Errorf("decision: status %d, response error %q, upstream latency %v", d.Status, d.ResponseError, d.UpstreamLatency)
	}
}

// TestBodyTooLarge caps request bodies, declared or chunked.
func TestBodyTooLarge(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(origin.Close)
	p := newProxied(t, origin.URL, func(c *config.Config) { c.Edge.Client.MaxBodyBytes = 10 })
	for i, c := range []struct {
		req, status string
	}{
		{"POST /api/search HTTP/1.1\r\nHost: edge\r\nContent-Length: 10\r\n\r\n0123456789", "HTTP/1.1 200 OK"},
		{"POST /api/search HTTP/1.1\r\nHost: edge\r\nContent-Length: 11\r\n\r\n0123456789a", "HTTP/1.1 413 Request Entity Too Large"},
		{"POST /api/search HTTP/1.1\r\nHost: edge\r\nTransfer-Encoding: chunked\r\n\r\nb\r\n0123456789a\r\n0\r\n\r\n", "HTTP/1.1 413 Request Entity Too Large"},
	} {
		if got := rawRequest(t, p.url, c.req); got != c.status {
			t.Errorf("request %d: %q, want %q", i+1, got, c.status)
		}
		d := p.sink.waitFor(t, i+1)[i]
		want := ""
		if c.status != "HTTP/1.1 200 OK" {
			want = decisions.BodyTooLarge
		}
		if d.ResponseError != want || !strings.Contains(c.status, " "+strconv.Itoa(d.Status)+" ") {
			t.Errorf("request %d: decision status %d, response error %q", i+1, d.Status, d.ResponseError)
		}
	}
}

// TestClientClosedMidResponse hangs up while the origin streams: the
// request still yields exactly one decision, recorded as client_closed.
func TestClientClosedMidResponse(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first part\n")
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // the edge gave up on it: its client left
	}))
	t.Cleanup(origin.Close)
	p := newProxied(t, origin.URL, nil)
	resp, err := http.Get(p.url + "/api/search")
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "first part\n" {
		t.Fatalf("first part: %q %v", line, err)
	}
	resp.Body.Close()
	d := p.sink.waitFor(t, 1)[0]
	if d.Status != 200 || d.ResponseError != decisions.ClientClosed {
		t.Errorf("decision: status %d, response error %q", d.Status, d.ResponseError)
	}
	p.srv.Close() // waits for the handler
	if n := len(p.sink.waitFor(t, 1)); n != 1 {
		t.Errorf("%d decisions, want 1", n)
	}
}
