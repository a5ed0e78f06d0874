package tests

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// sendRaw writes raw to the edge at base from the loopback address local,
// exactly as given, and reads responses until the edge closes the
// connection or is silent for a second: their statuses.
func sendRaw(t *testing.T, base, local, raw string) []int {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var statuses []int
	for {
		c.SetReadDeadline(time.Now().Add(time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return statuses
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
	}
}

// TestEdgeRequestSmuggling keeps an attacker's tries at a request the edge
// and the origin frame or read differently, under every edge server: a
// body framed by both Content-Length and Transfer-Encoding, two
// Content-Lengths, folded headers, header names with spaces, overlong
// headers, absolute-form targets and dot-dot paths, each carrying a second
// request or a header the edge would not believe. Whatever a server
// accepts or refuses of them (the servers differ: fasthttp answers some
// with its own 400 where net/http forwards, and the other way round), the
// invariants hold: every request the origin gets is one the edge decided
// and passed, with one framing, a path that starts with /, and no header
// an untrusted client claimed about its identity.
func TestEdgeRequestSmuggling(t *testing.T) {
	bin := buildBinary(t)
	cases := []struct {
		name string
		raw  string
		// refused: the first request must be refused (400, 431, 501
		// for a transfer coding net/http does not implement, or 505 for
		// a version of HTTP other than 1.x).
		refused bool
	}{
		{"Content-Length and Transfer-Encoding", "POST /api/search HTTP/1.1\r\nHost: edge\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"0\r\n\r\nGET /api/admin/smuggled HTTP/1.1\r\nHost: edge\r\n\r\n", false},
		{"Transfer-Encoding and Content-Length", "POST /api/search HTTP/1.1\r\nHost: edge\r\nTransfer-Encoding: chunked\r\nContent-Length: 60\r\n\r\n" +
			"0\r\n\r\nGET /api/admin/smuggled HTTP/1.1\r\nHost: edge\r\n\r\n", false},
		{"two Content-Lengths", "POST /api/search HTTP/1.1\r\nHost: edge\r\nContent-Length: 0\r\nContent-Length: 44\r\n\r\n" +
			"GET /api/admin/smuggled HTTP/1.1\r\nHost: edge\r\n\r\n", true},
		{"Transfer-Encoding not chunked last", "POST /api/search HTTP/1.1\r\nHost: edge\r\nTransfer-Encoding: chunked, identity\r\n\r\n" +
			"0\r\n\r\nGET /api/admin/smuggled HTTP/1.1\r\nHost: edge\r\n\r\n", true},
		{"folded Transfer-Encoding", "POST /api/search HTTP/1.1\r\nHost: edge\r\nContent-Length: 4\r\nTransfer-Encoding:\r\n chunked\r\n\r\n" +
			"0\r\n\r\nGET /api/admin/smuggled HTTP/1.1\r\nHost: edge\r\n\r\n", false},
		{"folded user header", "GET /api/search HTTP/1.1\r\nHost: edge\r\nX-Note: a\r\n X-User-Id: admin\r\n\r\n", false},
		{"space before the colon", "GET /api/search HTTP/1.1\r\nHost: edge\r\nX-User-Id : admin\r\n\r\n", true},
		{"space in a header name", "GET /api/search HTTP/1.1\r\nHost: edge\r\nX-Forwarded-For x: 198.51.100.9\r\nX User-Id: admin\r\n\r\n", true},
		{"header over 64 KiB", "GET /api/search HTTP/1.1\r\nHost: edge\r\nX-Pad: " + strings.Repeat("a", 70000) + "\r\n\r\n", true},
		{"CR in a header value", "GET /api/search HTTP/1.1\r\nHost: edge\r\nX-Note: a\rX-User-Id: admin\r\n\r\n", true},
		{"absolute form to another host", "GET http://admin.internal/api/admin/users HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n", false},
		{"dot-dot out of a passed prefix", "GET /api/search/../admin/users HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n", true},
		{"encoded dot-dot", "GET /api/search/%2e%2e/admin/users HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n", true},
		// HTTP/2 over a connection of HTTP/1 framing, HTTP/0.9 with
		// headers, a version not made yet: which framing? 505 from both.
		{"HTTP/2.0 in the request line", "GET /api/search HTTP/2.0\r\nHost: edge\r\nConnection: close\r\n\r\n", true},
		{"HTTP/0.9 in the request line", "GET /api/search HTTP/0.9\r\nHost: edge\r\nConnection: close\r\n\r\n", true},
		{"HTTP/9.9 in the request line", "GET /api/search HTTP/9.9\r\nHost: edge\r\nConnection: close\r\n\r\n", true},
	}
	eachServer(t, func(t *testing.T, server string) {
		origin := newRecordingOrigin(t)
		decisionsFile := filepath.Join(t.TempDir(), "decisions.jsonl")
		base, _ := startEdge(t, bin, nil, "--server", server, "--config", seedWith(t, ""), "--upstream", origin.URL, "--decisions-file", decisionsFile)
		var forwarded []received
		for _, c := range cases {
			// From 127.0.0.2, a peer the edge does not trust.
			statuses := sendRaw(t, base, "127.0.0.2", c.raw)
			if len(statuses) == 0 {
				t.Errorf("%s: no answer", c.name)
				continue
			}
			if c.refused && !slices.Contains([]int{400, 431, 501, 505}, statuses[0]) {
				t.Errorf("%s: %v, want the first refused with 400, 431, 501 or 505", c.name, statuses)
			}
			got := origin.take()
			for _, r := range got {
				if !strings.HasPrefix(r.target, "/") {
					t.Errorf("%s: the origin got target %q", c.name, r.target)
				}
				if r.header.Get("X-User-Id") != "" {
					t.Errorf("%s: the origin got X-User-Id %q from an untrusted client", c.name, r.header.Get("X-User-Id"))
				}
				if xff := r.header.Get("X-Forwarded-For"); xff != "127.0.0.2" {
					t.Errorf("%s: the origin got X-Forwarded-For %q, want 127.0.0.2", c.name, xff)
				}
				for k := range r.header {
					if strings.ContainsAny(k, " \t") {
						t.Errorf("%s: the origin got header %q", c.name, k)
					}
				}
				if len(r.header["Content-Length"]) > 0 && len(r.header["Transfer-Encoding"]) > 0 {
					t.Errorf("%s: the origin got both Content-Length and Transfer-Encoding", c.name)
				}
			}
			t.Logf("%s: %s answered %v, the origin got %d", c.name, server, statuses, len(got))
			forwarded = append(forwarded, got...)
		}
		// Every request the origin got was decided and passed, path for
		// path; nothing reached it around the edge.
		stops[t.Name()]()
		var passed []string
		for _, d := range readDecisions(t, decisionsFile) {
			if d.Outcome == decisions.Allow || d.Outcome == decisions.FailOpen {
				passed = append(passed, d.Path)
			}
		}
		var paths []string
		for _, r := range forwarded {
			p, _, _ := strings.Cut(r.target, "?")
			paths = append(paths, strings.ToLower(p))
		}
		if fmt.Sprint(paths) != fmt.Sprint(passed) {
			t.Errorf("the origin got %v; the edge passed %v", paths, passed)
		}
	})
}
