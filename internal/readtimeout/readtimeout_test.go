package readtimeout

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/deadline"
)

// origin serves /stall (the headers and part of a body of declared
// length, then nothing, until the client goes away), /drip (a body sent
// a chunk every 20 ms) and /ok.
func origin(t *testing.T, chunked bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stall":
			if !chunked {
				w.Header().Set("Content-Length", "100000")
			}
			w.Write(make([]byte, 1000))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case "/drip":
			if !chunked {
				w.Header().Set("Content-Length", strconv.Itoa(dripChunks*100))
			}
			for range dripChunks {
				w.Write(bytes.Repeat([]byte{'d'}, 100))
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond)
			}
		default:
			io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// dripChunks is how many chunks /drip sends, 20 ms apart: about 1.2 s.
const dripChunks = 60

func client(d time.Duration, timedOut func(*http.Request)) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	return &http.Client{Transport: Transport(tr, d, timedOut)}
}

// TestStalledBodyIsCutOff: an origin that stops sending mid-body ends the
// response with ErrTimeout, once, in the reading goroutine, whatever the
// framing of the body.
func TestStalledBodyIsCutOff(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		t.Run("chunked="+strconv.FormatBool(chunked), func(t *testing.T) {
			srv := origin(t, chunked)
			var noted atomic.Int32
			c := client(100*time.Millisecond, func(r *http.Request) {
				if r.URL.Path != "/stall" {
					t.Errorf("timed out: %s", r.URL.Path)
				}
				noted.Add(1)
			})
			resp, err := c.Get(srv.URL + "/stall")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			done := make(chan struct{})
			var n int64
			go func() {
				defer close(done)
				n, err = io.Copy(io.Discard, resp.Body)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the body of a stalled origin was still being read after 10 s")
			}
			if !errors.Is(err, ErrTimeout) || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read %d bytes, then %v: want ErrTimeout", n, err)
			}
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Errorf("%v is not a net.Error timing out", err)
			}
			if n != 1000 {
				t.Errorf("read %d bytes before the stall, want 1000", n)
			}
			if got := noted.Load(); got != 1 {
				t.Errorf("timedOut called %d times, want 1", got)
			}
		})
	}
}

// TestSteadyBodyIsNot: a body that keeps coming is read whole, even when
// it takes far longer than the timeout; the bound is per read.
func TestSteadyBodyIsNot(t *testing.T) {
	const d = 300 * time.Millisecond
	for _, chunked := range []bool{false, true} {
		t.Run("chunked="+strconv.FormatBool(chunked), func(t *testing.T) {
			srv := origin(t, chunked)
			c := client(d, func(*http.Request) { t.Error("timed out") })
			start := time.Now()
			resp, err := c.Get(srv.URL + "/drip")
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			took := time.Since(start)
			if err != nil || !bytes.Equal(b, bytes.Repeat([]byte{'d'}, dripChunks*100)) {
				t.Fatalf("read %d bytes in %v, then %v", len(b), took, err)
			}
			if took < 2*d {
				// Not a failure of the code: the test did not show what it is for.
				t.Fatalf("the body took %v, under twice the timeout: the origin sent faster than the test means it to", took)
			}
		})
	}
}

// TestIdleConnectionKept: the timeout bounds a body's reads, not a
// connection kept idle for reuse: a request after the connection was idle
// for longer than the timeout goes out on it and is answered.
func TestIdleConnectionKept(t *testing.T) {
	const d = 50 * time.Millisecond
	srv := origin(t, false)
	c := client(d, func(*http.Request) { t.Error("timed out") })
	for i := range 2 {
		var reused bool
		req, _ := http.NewRequest("GET", srv.URL+"/ok", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
		}))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != "ok" {
			t.Fatalf("request %d: %q, %v", i+1, b, err)
		}
		if i == 1 && !reused {
			t.Error("the second request did not reuse the idle connection")
		}
		time.Sleep(4 * d)
	}
}

// TestZeroIsNone: no timeout leaves the transport as it is.
func TestZeroIsNone(t *testing.T) {
	tr := &http.Transport{}
	if rt := Transport(tr, 0, nil); rt != tr {
		t.Fatalf("Transport(rt, 0) is %T, want rt", rt)
	}
}

// BenchmarkRead is what the bound adds to a read of a response body that
// is already there (the proxy's hot path: most reads find their bytes in
// the connection's buffer): raw is the body as the transport returns it,
// bounded is Transport's, and every-read the same with its timer renewed
// at every read.
func BenchmarkRead(b *testing.B) {
	for _, kind := range []string{"raw", "bounded", "every-read"} {
		b.Run(kind, func(b *testing.B) {
			src := &endless{}
			var r io.Reader = src
			if kind != "raw" {
				bb := &body{rc: io.NopCloser(src), d: time.Minute, cancel: func(error) {}}
				keep := deadline.Keep(time.Minute)
				if kind == "every-read" {
					keep = time.Minute
				}
				bb.until.Init(time.Minute, keep)
				defer bb.Close()
				r = bb
			}
			p := make([]byte, 512)
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Read(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// endless is a body that never ends.
type endless struct{}

func (*endless) Read(p []byte) (int, error) { return len(p), nil }

// BenchmarkRoundTrip is what the bound adds to a request whose small
// body is read in one go and closed (the request's context and copy, the
// body and its timer): raw is the transport itself, bounded Transport's.
func BenchmarkRoundTrip(b *testing.B) {
	for _, kind := range []string{"raw", "bounded"} {
		b.Run(kind, func(b *testing.B) {
			var rt http.RoundTripper = answer{}
			if kind == "bounded" {
				rt = Transport(rt, time.Minute, nil)
			}
			req := httptest.NewRequest("GET", "http://origin/", nil)
			p := make([]byte, 512)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Read(p)
				resp.Body.Close()
			}
		})
	}
}

// answer answers every request with a small body, as a transport does.
type answer struct{}

func (answer) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: io.NopCloser(&endless{}), Request: req}, nil
}
