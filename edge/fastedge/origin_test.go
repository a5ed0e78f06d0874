package fastedge

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/internal/deadline"
)

// dripChunks is how many chunks of 100 bytes the test origins' /drip
// sends, 20 ms apart: about 1.2 s.
const dripChunks = 60

// stallingOrigin serves /stall (the headers and part of a body, then
// nothing until the client goes away or the test ends; chunked for
// ?chunked), /drip (a
// body sent a chunk every 20 ms), /late (headers after twice late) and
// /ok; remotes records the client address of each request.
func stallingOrigin(t *testing.T, late time.Duration) (*httptest.Server, *remotes) {
	t.Helper()
	rs := &remotes{}
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs.add(r.RemoteAddr)
		switch r.URL.Path {
		case "/stall":
			if r.URL.RawQuery != "chunked" {
				w.Header().Set("Content-Length", "100000")
			}
			w.Write(make([]byte, 1000))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/drip":
			w.Header().Set("Content-Length", strconv.Itoa(dripChunks*100))
			for range dripChunks {
				w.Write(bytes.Repeat([]byte{'d'}, 100))
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond)
			}
		case "/late":
			time.Sleep(2 * late)
			io.WriteString(w, "late")
		default:
			io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before srv.Close, which waits for the handlers
	return srv, rs
}

type remotes struct {
	mu   sync.Mutex
	list []string
}

func (r *remotes) add(a string) {
	r.mu.Lock()
	r.list = append(r.list, a)
	r.mu.Unlock()
}

func (r *remotes) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.list...)
}

// readTimeoutYAML is testYAML with a read timeout of 200 ms.
var readTimeoutYAML = strings.Replace(testYAML, "    response_header_timeout: 300ms\n",
	"    response_header_timeout: 300ms\n    read_timeout: 200ms\n", 1)

// TestStalledOriginBody: an origin that stalls mid-body is cut off after
// edge.origin.read_timeout, whatever the framing of its body: the client
// gets a truncated response (the connection closed short of the
// Content-Length, or no last chunk), recorded as upstream_read_timeout.
func TestStalledOriginBody(t *testing.T) {
	if readTimeoutYAML == testYAML {
		t.Fatal("testYAML has no response_header_timeout line")
	}
	origin, _ := stallingOrigin(t, 0)
	base, s := serveYAML(t, origin.URL, readTimeoutYAML)
	client := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"/stall", "/stall?chunked"} {
		// The client gets a truncated response or, as its headers were
		// still buffered, none at all.
		var n int64
		resp, err := client.Get(base + path)
		if err == nil {
			n, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		var ne net.Error
		if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
			t.Errorf("%s: the client read %d bytes, then %v: want the response cut off", path, n, err)
		}
		if d := s.next(t); d.Status != 200 || d.ResponseError != decisions.UpstreamReadTimeout {
			t.Errorf("%s: status %d, response error %q, want 200 %s", path, d.Status, d.ResponseError, decisions.UpstreamReadTimeout)
		}
	}
}

// TestSteadyOriginBody: a body that keeps coming is passed on whole, even
// when it takes far longer than the read timeout.
func TestSteadyOriginBody(t *testing.T) {
	origin, _ := stallingOrigin(t, 0)
	base, s := serveYAML(t, origin.URL, readTimeoutYAML)
	start := time.Now()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(base + "/drip")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil || len(b) != dripChunks*100 {
		t.Fatalf("read %d bytes in %v, then %v", len(b), took, err)
	}
	if d := s.next(t); d.ResponseError != "" {
		t.Errorf("response error %q", d.ResponseError)
	}
	if took < 400*time.Millisecond {
		// Not a failure of the code: the test did not show what it is for.
		t.Fatalf("the body took %v, under twice the timeout: the origin sent faster than the test means it to", took)
	}
}

// TestBodyDeadlineDoesNotOutliveTheResponse: the read deadline of a
// body does not stay on the connection kept for reuse: the next request
// on it, after the connection was idle past that deadline, waits for its
// headers for as long as the origin takes (no response header timeout
// here), and is answered.
func TestBodyDeadlineDoesNotOutliveTheResponse(t *testing.T) {
	const d = 100 * time.Millisecond
	origin, rs := stallingOrigin(t, d)
	u, _ := url.Parse(origin.URL)
	oc, err := NewOriginClient(u, config.Origin{ReadTimeout: d}, 10)
	if err != nil {
		t.Fatal(err)
	}
	// The body of /drip comes in many reads, each setting the deadline.
	for i, path := range []string{"/drip", "/late"} {
		if i > 0 {
			time.Sleep(3 * d)
		}
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI(origin.URL + path)
		if err := oc.Do(req, resp); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, err := io.ReadAll(resp.BodyStream())
		resp.CloseBodyStream()
		if want := strings.TrimPrefix(path, "/"); err != nil || (path == "/late" && string(b) != want) || (path == "/drip" && len(b) != dripChunks*100) {
			t.Fatalf("%s: %d bytes, %v", path, len(b), err)
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	if got := rs.get(); len(got) != 2 || got[0] != got[1] {
		t.Errorf("the requests came from %v: want one connection, reused", got)
	}
}

// BenchmarkOriginRead is what the read timeout adds to a read of an
// origin's response body: raw is the connection as dialled, bounded is
// originConn's with edge.origin.read_timeout, and every-read the same
// with its deadline set at every read.
func BenchmarkOriginRead(b *testing.B) {
	for _, kind := range []string{"raw", "bounded", "every-read"} {
		b.Run(kind, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				p := make([]byte, 64<<10)
				for {
					if _, err := c.Write(p); err != nil {
						return
					}
				}
			}()
			raw, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer raw.Close()
			var c net.Conn = raw
			if kind != "raw" {
				oc := &originConn{Conn: raw} // past the headers
				keep := deadline.Keep(time.Minute)
				if kind == "every-read" {
					keep = time.Minute
				}
				oc.body.Init(time.Minute, keep)
				c = oc
			}
			p := make([]byte, 512)
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := io.ReadFull(c, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
