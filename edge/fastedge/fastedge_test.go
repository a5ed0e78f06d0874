package fastedge

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge"
)

// sink keeps the decisions the limiter emits.
type sink struct {
	mu sync.Mutex
	ds []decisions.Decision
	ch chan struct{}
}

func (s *sink) Emit(d decisions.Decision) bool {
	s.mu.Lock()
	s.ds = append(s.ds, d)
	s.mu.Unlock()
	s.ch <- struct{}{}
	return true
}

// next waits for the next decision.
func (s *sink) next(t *testing.T) decisions.Decision {
	t.Helper()
	select {
	case <-s.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no decision")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.ds[0]
	s.ds = s.ds[1:]
	return d
}

const testYAML = `
edge:
  node: test
  client:
    max_body_bytes: 1024
    body_timeout: 2s
  origin:
    response_header_timeout: 300ms
identity:
  trusted_proxies: [127.0.0.1]
tiers:
  anonymous:
    global: {limit: 1000}
`

// serve runs the fasthttp edge on loopback in front of origin, as
// assemble does, and returns its base URL and the decisions it emits.
func serve(t *testing.T, origin string) (string, *sink) {
	t.Helper()
	return serveYAML(t, origin, testYAML)
}

// serveYAML is serve with the configuration yaml.
func serveYAML(t *testing.T, origin, yaml string) (string, *sink) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + ln.Addr().String(), serveOn(t, ln, origin, yaml)
}

// serveOn is serveYAML on the listener ln.
func serveOn(t *testing.T, ln net.Listener, origin, yaml string) *sink {
	t.Helper()
	cfg, l, s := newLimiter(t, yaml)
	u, _ := url.Parse(origin)
	oc, err := NewOriginClient(u, cfg.Edge.Origin, 100)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(l, oc, Config{MaxBodyBytes: cfg.Edge.Client.MaxBodyBytes, BodyTimeout: cfg.Edge.Client.BodyTimeout, OriginHost: oc.Host()})
	srv := NewServer(cfg.Edge.Client, h, nil)
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.ShutdownWithContext(ctx)
	})
	return s
}

// newLimiter returns the configuration yaml and a limiter on it, which
// emits its decisions to the sink returned.
func newLimiter(t *testing.T, yaml string) (*config.Config, *edge.Limiter, *sink) {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := &sink{ch: make(chan struct{}, 100)}
	l, err := edge.New(cfg, edge.Options{Sink: s})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return cfg, l, s
}

// TestStreamsLargeResponses: a response reaches the client as the origin
// sends it, not once the origin has sent it all; its decision is emitted
// when it has ended, with the origin's status.
func TestStreamsLargeResponses(t *testing.T) {
	read := make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("a", 64<<10)))
		w.(http.Flusher).Flush()
		// The rest only once the client has read the first part: a proxy
		// that buffers whole responses never gets there.
		select {
		case <-read:
		case <-time.After(10 * time.Second):
			return
		}
		for range 64 {
			w.Write([]byte(strings.Repeat("b", 64<<10)))
		}
	}))
	defer origin.Close()
	base, s := serve(t, origin.URL)
	resp, err := http.Get(base + "/big")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 64<<10)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatalf("the first 64 KiB: %v", err)
	}
	select {
	case <-s.ch:
		t.Fatal("decision emitted before the response ended")
	default:
	}
	close(read)
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n != 64*64<<10 {
		t.Fatalf("the rest: %d bytes, %v", n, err)
	}
	d := s.next(t)
	if d.Status != 200 || d.ResponseError != "" || d.Outcome != decisions.Allow || d.UpstreamLatency <= 0 {
		t.Errorf("decision %+v", d)
	}
}

// TestResponseErrors: an origin that breaks off its body, and a client
// that goes away mid-body, are recorded as net/http's edge records them.
func TestResponseErrors(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/broken":
			w.Header().Set("Content-Length", "100000")
			w.Write([]byte("only this"))
			w.(http.Flusher).Flush()
			c, _, _ := http.NewResponseController(w).Hijack()
			c.Close()
		case "/endless":
			for {
				if _, err := w.Write(make([]byte, 32<<10)); err != nil {
					return
				}
			}
		}
	}))
	defer origin.Close()
	base, s := serve(t, origin.URL)

	resp, err := http.Get(base + "/broken")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Error("a truncated response read whole")
	}
	if d := s.next(t); d.Status != 200 || d.ResponseError != decisions.UpstreamFailed {
		t.Errorf("origin broke off: status %d, response error %q, want 200 %s", d.Status, d.ResponseError, decisions.UpstreamFailed)
	}

	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /endless HTTP/1.1\r\nHost: edge\r\n\r\n")
	br := bufio.NewReader(c)
	if _, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	}
	io.ReadFull(br, make([]byte, 1<<20))
	c.Close()
	if d := s.next(t); d.ResponseError != decisions.ClientClosed {
		t.Errorf("client went away: response error %q, want %s", d.ResponseError, decisions.ClientClosed)
	}
}

// TestForwardsHopByHop: the headers a client names in Connection, and the
// other hop-by-hop headers, stop at the edge both ways; the request id is
// kept when the client sent one and generated otherwise.
func TestForwardsHopByHop(t *testing.T) {
	var got http.Header
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Connection", "X-Origin-Secret")
		w.Header().Set("X-Origin-Secret", "s")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Kept", "k")
	}))
	defer origin.Close()
	base, s := serve(t, origin.URL)
	req, _ := http.NewRequest("GET", base+"/x", nil)
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "h")
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	req.Header.Set("Te", "trailers, deflate")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("X-Request-Id", "r-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, k := range []string{"X-Hop", "Proxy-Authorization", "Upgrade"} {
		if v := got.Get(k); v != "" {
			t.Errorf("the origin got %s %q", k, v)
		}
	}
	if got.Get("Te") != "trailers" || got.Get("X-Request-Id") != "r-1" {
		t.Errorf("the origin got Te %q, X-Request-Id %q", got.Get("Te"), got.Get("X-Request-Id"))
	}
	for _, k := range []string{"X-Origin-Secret", "Keep-Alive"} {
		if v := resp.Header.Get(k); v != "" {
			t.Errorf("the client got %s %q", k, v)
		}
	}
	if resp.Header.Get("X-Kept") != "k" || resp.Header.Get("X-Ratelimit-Limit") != "1000" {
		t.Errorf("the client got %v", resp.Header)
	}
	if d := s.next(t); d.RequestID != "r-1" {
		t.Errorf("request id %q, want r-1", d.RequestID)
	}

	resp, err = http.Get(base + "/y")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	d := s.next(t)
	if d.RequestID == "" || got.Get("X-Request-Id") != d.RequestID {
		t.Errorf("generated request id %q, the origin got %q", d.RequestID, got.Get("X-Request-Id"))
	}
}

// TestSplitTarget: the host and path of a request target as net/http
// reads them.
func TestSplitTarget(t *testing.T) {
	for _, c := range []struct{ in, host, pq string }{
		{"/a/b?c", "", "/a/b?c"},
		{"*", "", "*"},
		{"http://h.example/a?b", "h.example", "/a?b"},
		{"HTTPS://u:p@h.example:8443?q", "h.example:8443", "?q"},
		{"http://h.example", "h.example", ""},
		{"a/b", "", "a/b"},
		{"1http://h/a", "", "1http://h/a"},
	} {
		host, pq := splitTarget([]byte(c.in))
		if string(host) != c.host || string(pq) != c.pq {
			t.Errorf("splitTarget(%q) = %q, %q; want %q, %q", c.in, host, pq, c.host, c.pq)
		}
	}
}

// TestUploads: a request body streams to the origin whole when it is within
// edge.client.max_body_bytes, and a chunked body that grows past it is cut
// off with 413 as it is read, recorded as body_too_large.
func TestUploads(t *testing.T) {
	got := make(chan int, 1) // the body bytes the origin read
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- len(b)
	}))
	defer origin.Close()
	base, s := serve(t, origin.URL)
	post := func(body io.Reader) int {
		t.Helper()
		resp, err := http.Post(base+"/upload", "text/plain", body)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// io.MultiReader hides the length: the client sends it chunked.
	if st := post(io.MultiReader(strings.NewReader(strings.Repeat("x", 1000)))); st != 200 {
		t.Errorf("chunked body within the cap: %d", st)
	}
	if n := <-got; n != 1000 {
		t.Errorf("the origin got %d bytes of 1000", n)
	}
	if d := s.next(t); d.Status != 200 || d.ResponseError != "" {
		t.Errorf("decision %+v", d)
	}
	if st := post(io.MultiReader(strings.NewReader(strings.Repeat("y", 5000)))); st != 413 {
		t.Errorf("chunked body over the cap: %d, want 413", st)
	}
	if d := s.next(t); d.Status != 413 || d.ResponseError != decisions.BodyTooLarge {
		t.Errorf("over the cap: status %d, response error %q", d.Status, d.ResponseError)
	}
	select {
	case n := <-got:
		if n > 1024 {
			t.Errorf("the origin got %d bytes of a body over the cap of 1024", n)
		}
	case <-time.After(5 * time.Second):
		t.Error("the origin's handler did not end")
	}
}

// panicOrigin panics on /panic and answers everything else.
type panicOrigin struct{}

func (panicOrigin) Do(req *fasthttp.Request, resp *fasthttp.Response) error {
	if string(req.URI().Path()) == "/panic" {
		panic("origin bug")
	}
	resp.SetBodyString("ok")
	return nil
}

// TestPanicDoesNotEndTheServer: a panic while serving a request answers it
// with 500 and the server goes on serving.
func TestPanicDoesNotEndTheServer(t *testing.T) {
	cfg, err := config.Parse([]byte(testYAML), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults()
	l, err := edge.New(cfg, edge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	srv := NewServer(cfg.Edge.Client, NewHandler(l, panicOrigin{}, Config{}), nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown()
	base := "http://" + ln.Addr().String()
	for _, c := range []struct {
		path string
		want int
	}{{"/panic", 500}, {"/after", 200}} {
		resp, err := http.Get(base + c.path)
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.path, resp.StatusCode, c.want)
		}
	}
}

// TestForwardsHTTP11: the origin gets a request in the edge's own version,
// HTTP/1.1, whatever the client's (RFC 9110 section 2.5), as under
// net/http's reverse proxy: before, an HTTP/1.0 request reached the
// origin as HTTP/1.0, whose connection the origin then closed.
func TestForwardsHTTP11(t *testing.T) {
	protos := make(chan string, 1)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos <- r.Proto
	}))
	defer origin.Close()
	base, s := serve(t, origin.URL)
	for _, version := range []string{"HTTP/1.0", "HTTP/1.1"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET /x "+version+"\r\nHost: edge\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		c.Close()
		s.next(t)
		if got := <-protos; resp.StatusCode != 200 || got != "HTTP/1.1" {
			t.Errorf("a %s request: status %d, the origin got %s, want HTTP/1.1", version, resp.StatusCode, got)
		}
	}
}

// TestRemovesHeaderAliases: a header that an origin reading headers as
// CGI variables (WSGI, Rack, PHP) reads as one the edge removes does not
// reach it: X_User_Id for X-User-Id, and, with a user header configured
// as X_User_Id, X-User-Id.
func TestRemovesHeaderAliases(t *testing.T) {
	var got http.Header
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
	}))
	defer origin.Close()
	underscored := strings.Replace(testYAML, "trusted_proxies: [127.0.0.1]", "trusted_proxies: [127.0.0.1]\n  user_header: X_User_Id", 1)
	for _, c := range []struct {
		name, yaml string
		sent, gone []string
	}{
		{"defaults", testYAML, []string{"X_User_Id", "x_forwarded_for", "X-Real_Ip"}, []string{"X_user_id", "X_forwarded_for", "X-Real_ip"}},
		{"user header named with _", underscored, []string{"X-User-Id"}, []string{"X-User-Id"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			base, s := serveYAML(t, origin.URL, c.yaml)
			req, _ := http.NewRequest("GET", base+"/x", nil)
			for _, k := range c.sent {
				req.Header[k] = []string{"admin"}
			}
			req.Header.Set("X_Trace_Id", "t1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			s.next(t)
			for _, k := range c.gone {
				if v := got[k]; v != nil {
					t.Errorf("the origin got %s %q", k, v)
				}
			}
			if got.Get("X_Trace_Id") != "t1" {
				t.Errorf("the origin got X_Trace_Id %q, want t1", got.Get("X_Trace_Id"))
			}
		})
	}
}

// TestNoClientAddressIsNotRetried: a request with no client address (a
// Unix socket peer has none) under a fail_closed prefix is refused with
// 503 and a body saying why, without Retry-After, on either server: the
// request will never have an address, so retrying cannot help. Before, it
// got "Retry-After: 1" and "Try again in 1 seconds", as in a store outage.
func TestNoClientAddressIsNotRetried(t *testing.T) {
	const yaml = testYAML + "fail_closed: [/api/admin/]\n"
	for _, server := range []string{"fasthttp", "net/http"} {
		t.Run(server, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "edge.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			var s *sink
			if server == "fasthttp" {
				s = serveOn(t, ln, "http://127.0.0.1:1", yaml)
			} else {
				var l *edge.Limiter
				_, l, s = newLimiter(t, yaml)
				srv := &http.Server{Handler: l.Middleware(http.NotFoundHandler())}
				go srv.Serve(ln)
				t.Cleanup(func() { srv.Close() })
			}
			client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", sock)
			}}}
			resp, err := client.Get("http://edge/api/admin/users")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 503 || resp.Header.Values("Retry-After") != nil ||
				!strings.Contains(string(body), `"error":"no_client_address"`) || strings.Contains(string(body), "retry_after") {
				t.Errorf("%d, Retry-After %q, body %s; want 503 without Retry-After, error no_client_address", resp.StatusCode, resp.Header.Values("Retry-After"), body)
			}
			if d := s.next(t); d.Outcome != decisions.FailClosed || d.Reason != edge.ReasonNoClientAddress {
				t.Errorf("decision %v %q, want fail_closed %q", d.Outcome, d.Reason, edge.ReasonNoClientAddress)
			}
		})
	}
}
