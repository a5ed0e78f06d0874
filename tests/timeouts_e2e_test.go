package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// timeoutsYAML is a configuration with timeouts short enough for tests.
const timeoutsYAML = `
edge:
  client:
    body_timeout: 300ms
    send_timeout: 300ms
    max_body_bytes: 1024
  origin:
    connect_timeout: 300ms
    response_header_timeout: 300ms
    read_timeout: 300ms
tiers:
  anonymous:
    global: {limit: 1000}
`

// responseLine is what these tests read of a decision line. It is decoded
// on its own, not with package decisions, so that the same test ran
// against the binary from before these fields existed, and failed.
type responseLine struct {
	Outcome         string  `json:"outcome"`
	Path            string  `json:"path"`
	Status          int     `json:"status"`
	UpstreamLatency float64 `json:"upstream_latency_us"`
	ResponseError   string  `json:"response_error"`
}

// TestEdgeTimeouts runs `ratewarden edge` against a slow origin, a dead
// origin, an origin that stalls mid-body, and slow clients: each is cut
// off within its configured timeout with the right status, and shows in
// the decision, on /metrics and in the log.
func TestEdgeTimeouts(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) { edgeTimeouts(t, bin, server) })
}

// edgeTimeouts is TestEdgeTimeouts with edge.server set to server in the
// configuration file.
func edgeTimeouts(t *testing.T, bin, server string) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "edge.yaml")
	yaml := strings.Replace(timeoutsYAML, "\nedge:\n", "\nedge:\n  server: "+server+"\n", 1)
	if yaml == timeoutsYAML {
		t.Fatal("timeoutsYAML has no edge section")
	}
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			// An origin that does not answer (95 s in the report); it is
			// released when the test ends.
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		if r.URL.Path == "/big" {
			writeBig(w)
			return
		}
		if r.URL.Path == "/stall" {
			// Headers and the first part of the body, then nothing, as an
			// origin stuck mid-body; released when the test ends, or
			// when the edge gives up on it.
			w.Header().Set("Content-Length", strconv.Itoa(stallBody))
			w.Write(make([]byte, stallPart))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	defer close(release)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadOrigin := "http://" + ln.Addr().String()
	ln.Close()

	client := &http.Client{Timeout: 10 * time.Second}
	cases := []struct {
		name     string
		upstream string
		send     func(t *testing.T, base string) int // the status the client got
		status   int
		respErr  string
		within   time.Duration // the edge answers within this (plus slack)
		earlier  int           // requests sent before the one cut off, each answered whole
	}{
		{"slow origin", origin.URL, func(t *testing.T, base string) int {
			return get(t, client, base+"/slow").status
		}, 504, "upstream_timeout", 300 * time.Millisecond, 0},
		{"dead origin", deadOrigin, func(t *testing.T, base string) int {
			return get(t, client, base+"/api").status
		}, 502, "upstream_unreachable", 0, 0},
		{"slowloris body", origin.URL, func(t *testing.T, base string) int {
			return slowBody(t, base, 50*time.Millisecond)
		}, 408, "body_timeout", 300 * time.Millisecond, 0},
		{"silent body", origin.URL, func(t *testing.T, base string) int {
			return slowBody(t, base, 0)
		}, 408, "body_timeout", 300 * time.Millisecond, 0},
		{"body over the cap", origin.URL, func(t *testing.T, base string) int {
			resp, err := client.Post(base+"/upload", "text/plain", strings.NewReader(strings.Repeat("x", 2000)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}, 413, "body_too_large", 0, 0},
		{"slow reader", origin.URL, func(t *testing.T, base string) int {
			return slowReader(t, base)
		}, 200, "send_timeout", 300 * time.Millisecond, 1},
		{"origin stalls mid-body", origin.URL, func(t *testing.T, base string) int {
			return stalledBody(t, client, base)
		}, 200, "upstream_read_timeout", 300 * time.Millisecond, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			decisionsFile := filepath.Join(t.TempDir(), "decisions.jsonl")
			base, admin := startEdge(t, bin, nil, "--config", cfgPath, "--upstream", c.upstream, "--decisions-file", decisionsFile)
			start := time.Now()
			if got := c.send(t, base); got != c.status {
				t.Errorf("status %d, want %d", got, c.status)
			}
			if took := time.Since(start); took < c.within || took > c.within+5*time.Second {
				t.Errorf("answered after %v, want about %v", took, c.within)
			}
			metrics := get(t, client, admin+"/metrics").body
			counter := `ratewarden_edge_response_errors_total\{[^}]*error="` + c.respErr + `"[^}]*\} 1\n`
			if !regexp.MustCompile(counter).MatchString(metrics) {
				t.Errorf("/metrics does not match %s:\n%s", counter, grepLines(metrics, "response_errors"))
			}
			stops[t.Name()]()
			if log := edgeLogs[t.Name()](); !strings.Contains(log, `msg="response failed" error=`+c.respErr) {
				t.Errorf("no warning in the log:\n%s", log)
			}
			b, err := os.ReadFile(decisionsFile)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) != c.earlier+1 {
				t.Fatalf("%d decisions, want %d:\n%s", len(lines), c.earlier+1, b)
			}
			for i, line := range lines {
				var d responseLine
				if err := json.Unmarshal([]byte(line), &d); err != nil {
					t.Fatal(err)
				}
				if i < c.earlier && (d.Outcome != "allow" || d.Status != 200 || d.ResponseError != "") {
					t.Errorf("decision of an earlier request %s", line)
				}
			}
			var d responseLine
			json.Unmarshal([]byte(lines[c.earlier]), &d)
			if d.Outcome != "allow" || d.Status != c.status || d.ResponseError != c.respErr {
				t.Errorf("decision %s", lines[c.earlier])
			}
			if c.within > 0 && d.UpstreamLatency < float64(c.within/time.Microsecond) && c.respErr == "upstream_timeout" {
				t.Errorf("upstream latency %vµs, want %v or more", d.UpstreamLatency, c.within)
			}
		})
	}
}

// stallBody is the Content-Length of the origin's answer to /stall, of
// which it sends stallPart bytes and then stalls: enough that the edge
// has sent the client the headers and some of the body when it gives up.
const (
	stallBody = 1 << 20
	stallPart = 64 << 10
)

// stalledBody asks for /stall and reads the answer until the connection
// ends, and returns the status. The edge must have ended the response
// short of its Content-Length, closing the connection: a client that read
// it whole, or that was still reading when its own timeout passed, was
// not cut off.
func stalledBody(t *testing.T, client *http.Client, base string) int {
	t.Helper()
	resp, err := client.Get(base + "/stall")
	if err != nil {
		t.Fatalf("stalled body: no response: %v", err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	var ne net.Error
	if err == nil || n >= stallBody || (errors.As(err, &ne) && ne.Timeout()) {
		t.Errorf("the client got %d bytes of %d, then %v: want the response cut off", n, stallBody, err)
	}
	return resp.StatusCode
}

// bigBody is the size of the origin's answer to /big: more than the
// kernel's buffers between the edge and a client hold.
const bigBody = 64 << 20

// writeBig writes the origin's answer to /big, until the edge stops
// taking it.
func writeBig(w io.Writer) {
	chunk := make([]byte, 64<<10)
	for range bigBody / len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// slowReader asks for /api and reads the answer, then at once, on the
// same connection with a small receive buffer, for /big, and reads none
// of that answer for a second and a half, as a slow-read attack does (a
// client holding the connection by not reading); it then reads what comes
// until the edge closes the connection, and returns the status. The edge
// must have cut the response off: a client that read all of it, or that
// was still reading when its own deadline of 20 s passed, was not. (The
// first request is there because net/http's server clears the write
// deadline after every response: see TestEdgeSendTimeoutAfterAResponse.)
func slowReader(t *testing.T, base string) int {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	if _, err := io.WriteString(c, "GET /api HTTP/1.1\r\nHost: edge\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	first, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("slow reader: no first response: %v", err)
	}
	io.Copy(io.Discard, first.Body)
	first.Body.Close()
	if _, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: edge\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("slow reader: no response: %v", err)
	}
	defer resp.Body.Close()
	if n, err := io.Copy(io.Discard, resp.Body); err == nil || n >= bigBody || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a client that stopped reading got %d bytes of %d, then %v: want the response cut off", n, bigBody, err)
	}
	return resp.StatusCode
}

// TestEdgeSendTimeoutAfterAResponse: a client that stops reading the
// response that follows another at once on its connection is cut off
// too, under both servers, though net/http's server clears the write
// deadline after every response. The timeout (3 s) is long enough that a
// deadline the edge set for the first response would still be one it
// keeps (see internal/sendtimeout) when the second is written.
func TestEdgeSendTimeoutAfterAResponse(t *testing.T) {
	bin := buildBinary(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			writeBig(w)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	cfgPath := filepath.Join(t.TempDir(), "edge.yaml")
	yaml := "edge:\n  client:\n    send_timeout: 3s\ntiers:\n  anonymous:\n    global: {limit: 1000}\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	eachServer(t, func(t *testing.T, server string) {
		base, _ := startEdge(t, bin, nil, "--server", server, "--config", cfgPath, "--upstream", origin.URL)
		if got := slowReader(t, base); got != http.StatusOK {
			t.Errorf("status %d, want 200", got)
		}
	})
}

// slowBody sends the headers of a request with a body of 100 bytes and
// then the body one byte every drip, as slow clients holding connections
// do (a slowloris), or not one byte of it when drip is 0, until the edge
// answers, and returns the status it answered.
func slowBody(t *testing.T, base string, drip time.Duration) int {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: edge\r\nContent-Length: 100\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	if drip > 0 {
		go func() {
			tick := time.NewTicker(drip)
			defer tick.Stop()
			for range 100 {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := c.Write([]byte{'x'}); err != nil {
					return
				}
			}
		}()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("slow body: no response: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// rawConn is a client connection to the edge, read as HTTP/1.1.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

// dialRaw connects to addr from the local address from ("": any), closing
// the connection when the test ends.
func dialRaw(t *testing.T, from, addr string) rawConn {
	t.Helper()
	c, err := tryDialRaw(t, from, addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tryDialRaw is dialRaw returning the dial's error.
func tryDialRaw(t *testing.T, from, addr string) (rawConn, error) {
	var d net.Dialer
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return rawConn{}, err
	}
	t.Cleanup(func() { c.Close() })
	return rawConn{c, bufio.NewReader(c)}, nil
}

// get sends a GET on c and returns the response's status, or the error of
// sending it or of waiting wait for the response.
func (c rawConn) get(wait time.Duration) (int, error) {
	c.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(c, "GET /api HTTP/1.1\r\nHost: edge\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestEdgeConnectionLimits runs `ratewarden edge` with a short header
// timeout and a cap of two client connections: a client that never
// finishes its headers is cut off, and a third connection waits while the
// first two are busy, and is served as soon as one of them is idle, which
// is closed to make room (counted on /metrics).
func TestEdgeConnectionLimits(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		cfgPath := filepath.Join(t.TempDir(), "edge.yaml")
		yaml := "edge:\n  client:\n    header_timeout: 300ms\n    max_connections: 2\ntiers:\n  anonymous:\n    global: {limit: 1000}\n"
		if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		entered, release := make(chan struct{}, 2), make(chan struct{})
		origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				entered <- struct{}{}
				<-release
			}
			io.WriteString(w, "ok")
		}))
		defer origin.Close()
		defer close(release)
		base, admin := startEdge(t, bin, nil, "--server", server, "--config", cfgPath, "--upstream", origin.URL)
		addr := strings.TrimPrefix(base, "http://")
		dial := func() rawConn { return dialRaw(t, "", addr) }

		// Timed from before the dial: the edge's header deadline starts when
		// it accepts, which may be before dial returns here.
		start := time.Now()
		slow := dial()
		slow.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(slow, "GET /api HTTP/1.1\r\nHost: edge\r\nX-Slow: ")
		// net/http closes the connection without a word; fasthttp answers
		// 408 first and then closes it. Either way the connection is cut
		// off at the header timeout and nothing reached the origin.
		if resp, err := http.ReadResponse(slow.r, nil); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if server == "net/http" || resp.StatusCode != http.StatusRequestTimeout {
				t.Errorf("unfinished headers: answered %d, want the connection closed", resp.StatusCode)
			}
		}
		if _, err := slow.r.ReadByte(); err != io.EOF {
			t.Errorf("unfinished headers: %v, want the connection closed", err)
		}
		if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second {
			t.Errorf("unfinished headers: closed after %v, want about 300ms", took)
		}
		// The edge gives the slot back just after the close the client saw:
		// until then, a new connection would wait, and one before it that
		// had not sent its request yet would be closed for it.
		waitFor(t, "the unfinished connection's slot", func(context.Context) error {
			if m := get(t, http.DefaultClient, admin+"/metrics").body; !regexp.MustCompile(`ratewarden_edge_connections_open\{[^}]*\} 0\n`).MatchString(m) {
				return errors.New(grepLines(m, "connections_open"))
			}
			return nil
		})

		// Two busy connections: a third waits.
		first, second := dial(), dial()
		for _, c := range []rawConn{first, second} {
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "GET /hold HTTP/1.1\r\nHost: edge\r\n\r\n")
			enters(t, entered)
		}
		third := dial()
		if s, err := third.get(200 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("third connection while two are busy: %d %v, want no answer", s, err)
		}
		// Once the first two are answered they are idle: one of them is
		// closed for the third, which is answered.
		release <- struct{}{}
		release <- struct{}{}
		for i, c := range []rawConn{first, second} {
			resp, err := http.ReadResponse(c.r, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("busy connection %d once released: %v", i+1, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		third.SetDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(third.r, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("third connection once the first two were idle: %v", err)
		}
		resp.Body.Close()
		closed := 0
		for _, c := range []rawConn{first, second} {
			c.SetDeadline(time.Now().Add(time.Second))
			if _, err := c.r.ReadByte(); err == io.EOF {
				closed++
			}
		}
		if closed != 1 {
			t.Errorf("%d of the two idle connections were closed for the third, want 1", closed)
		}
		// Both open connections are idle keep-alives now, as an attacker's
		// that send a request every idle_timeout would be: a newcomer is
		// served at once, in the place of one of them.
		if s, err := dial().get(10 * time.Second); s != 200 {
			t.Fatalf("a newcomer while both open connections are idle: %d %v", s, err)
		}
		metrics := get(t, http.DefaultClient, admin+"/metrics").body
		for _, want := range []string{`ratewarden_edge_connections_drained_total\{[^}]*\} 2\n`, `ratewarden_edge_connections_open\{[^}]*\} 2\n`} {
			if !regexp.MustCompile(want).MatchString(metrics) {
				t.Errorf("/metrics does not match %s:\n%s", want, grepLines(metrics, "connections"))
			}
		}
	})
}

// enters waits for a held request to reach the origin (its handler sends
// on entered), for at most 10 seconds.
func enters(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the origin in 10s")
	}
}

// TestEdgeConnectionLimitsPipelined: at the cap of two connections, both
// busy and a newcomer waiting, a client that pipelined a second request
// behind its first gets both answers. Its connection is idle for a moment
// between them (fasthttp holding the first answer back for the second,
// net/http waiting to read it), and closing it then for the newcomer would
// lose the answers; it is closed for the newcomer once it stays idle.
func TestEdgeConnectionLimitsPipelined(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		cfgPath := filepath.Join(t.TempDir(), "edge.yaml")
		yaml := "edge:\n  client:\n    max_connections: 2\ntiers:\n  anonymous:\n    global: {limit: 1000}\n"
		if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		entered := make(chan struct{}, 2)
		release := map[string]chan struct{}{"/hold1": make(chan struct{}), "/hold2": make(chan struct{})}
		origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ch, ok := release[r.URL.Path]; ok {
				entered <- struct{}{}
				<-ch
			}
			io.WriteString(w, "ok "+r.URL.Path)
		}))
		defer origin.Close()
		defer close(release["/hold2"])
		base, _ := startEdge(t, bin, nil, "--server", server, "--config", cfgPath, "--upstream", origin.URL)
		addr := strings.TrimPrefix(base, "http://")

		pipelined, busy := dialRaw(t, "", addr), dialRaw(t, "", addr)
		for _, c := range []rawConn{pipelined, busy} {
			c.SetDeadline(time.Now().Add(10 * time.Second))
		}
		io.WriteString(pipelined, "GET /hold1 HTTP/1.1\r\nHost: edge\r\n\r\nGET /next HTTP/1.1\r\nHost: edge\r\n\r\n")
		enters(t, entered)
		io.WriteString(busy, "GET /hold2 HTTP/1.1\r\nHost: edge\r\n\r\n")
		enters(t, entered)
		newcomer := dialRaw(t, "", addr)
		if s, err := newcomer.get(200 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a third connection while two are busy: %d %v, want no answer", s, err)
		}
		close(release["/hold1"])
		for _, want := range []string{"ok /hold1", "ok /next"} {
			resp, err := http.ReadResponse(pipelined.r, nil)
			if err != nil {
				t.Fatalf("the pipelined client's answer %q: %v", want, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != want {
				t.Fatalf("the pipelined client got %d %q, want 200 %q", resp.StatusCode, body, want)
			}
		}
		// Then it stays idle, and goes for the newcomer, which is answered
		// (its request was sent above).
		newcomer.SetDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(newcomer.r, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("the newcomer once the pipelined connection was idle: %v", err)
		}
		resp.Body.Close()
		if _, err := pipelined.r.ReadByte(); err != io.EOF {
			t.Errorf("the pipelined connection, idle: %v, want it closed for the newcomer", err)
		}
	})
}

// TestEdgeConnectionsPerAddress runs `ratewarden edge` with at most two
// connections per client address: a third from the same address is reset
// at once, unanswered, while another address is served, a trusted proxy
// is not capped, and the address gets its slot back when one of its
// connections closes. The refusal shows on /metrics and in the log.
func TestEdgeConnectionsPerAddress(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		cfgPath := filepath.Join(t.TempDir(), "edge.yaml")
		yaml := "edge:\n  client:\n    max_connections: 10\n    max_connections_per_address: 2\n" +
			"identity:\n  trusted_proxies: [127.0.0.3]\ntiers:\n  anonymous:\n    global: {limit: 1000}\n"
		if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
		defer origin.Close()
		base, admin := startEdge(t, bin, nil, "--server", server, "--config", cfgPath, "--upstream", origin.URL)
		addr := strings.TrimPrefix(base, "http://")
		dial := func(from string) rawConn { return dialRaw(t, from, addr) }
		send := func(c rawConn) (int, error) { return c.get(10 * time.Second) }
		// connect dials from from and sends a request; a reset may come
		// before the dial returns.
		connect := func(from string) (int, error) {
			c, err := tryDialRaw(t, from, addr)
			if err != nil {
				return 0, err
			}
			return send(c)
		}
		first, second := dial("127.0.0.1"), dial("127.0.0.1")
		for i, c := range []rawConn{first, second} {
			if s, err := send(c); s != 200 {
				t.Fatalf("connection %d of 127.0.0.1: %d %v", i+1, s, err)
			}
		}
		start := time.Now()
		if s, err := connect("127.0.0.1"); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a third connection of 127.0.0.1: %d %v, want it reset unanswered", s, err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("the third connection was cut off after %v, want at once", took)
		}
		// Another address, and a trusted proxy past the cap, are served.
		if s, err := send(dial("127.0.0.2")); s != 200 {
			t.Fatalf("127.0.0.2 beside 127.0.0.1's two: %d %v", s, err)
		}
		for i := range 3 {
			if s, err := send(dial("127.0.0.3")); s != 200 {
				t.Fatalf("connection %d of the trusted proxy 127.0.0.3: %d %v", i+1, s, err)
			}
		}
		// Held connections still work, and a closed one frees its slot.
		if s, err := send(second); s != 200 {
			t.Fatalf("127.0.0.1's second connection after the refusal: %d %v", s, err)
		}
		metrics := get(t, http.DefaultClient, admin+"/metrics").body
		if want := regexp.MustCompile(`\nratewarden_edge_connections_refused_total\{[^}]*\} 1\n`); !want.MatchString(metrics) {
			t.Errorf("/metrics does not match %s:\n%s", want, grepLines(metrics, "connections"))
		}
		first.Close()
		var s int
		var err error
		for range 50 { // the edge sees the close a moment after it is made
			if s, err = connect("127.0.0.1"); s == 200 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if s != 200 {
			t.Fatalf("127.0.0.1 once its first connection closed: %d %v", s, err)
		}
		stops[t.Name()]()
		if log := edgeLogs[t.Name()](); !strings.Contains(log, `msg="connections refused" addr=127.0.0.1 over=edge.client.max_connections_per_address`) {
			t.Errorf("no warning in the log:\n%s", log)
		}
	})
}
