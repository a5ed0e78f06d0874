package tests

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// upgradeYAML limits anonymous clients to three requests a minute, with
// an origin read timeout short enough for a test.
const upgradeYAML = `
edge:
  server: SERVER
  origin:
    read_timeout: 300ms
tiers:
  anonymous:
    global: {limit: 3}
`

// TestEdgeUpgrade runs `ratewarden edge` in front of an origin that
// switches protocols (as WebSocket does) and echoes a line. Under
// net/http the switch passes through: bytes go both ways; a connection
// on which the origin then stays silent is closed after
// edge.origin.read_timeout (before, it stayed open for ever, holding a
// slot of edge.client.max_connections); an upgrade is a request the limit
// counts, and one over it is refused, not switched. Under fasthttp the
// origin never sees the Upgrade header and answers an ordinary request.
func TestEdgeUpgrade(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		dir := t.TempDir()
		cfgPath := filepath.Join(dir, "edge.yaml")
		if err := os.WriteFile(cfgPath, []byte(strings.Replace(upgradeYAML, "SERVER", server, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		originEnded := make(chan error, 8)
		origin := switchingOrigin(t, nil, func(conn net.Conn, rw *bufio.ReadWriter) {
			line, err := rw.ReadString('\n')
			if err != nil {
				originEnded <- err
				return
			}
			rw.WriteString(line)
			rw.Flush()
			// Then silence, until the edge closes the connection.
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, err = io.Copy(io.Discard, rw)
			originEnded <- err
		})
		defer origin.Close()
		decisionsFile := filepath.Join(dir, "decisions.jsonl")
		base, _ := startEdge(t, bin, nil, "--config", cfgPath, "--upstream", origin.URL, "--decisions-file", decisionsFile)
		inOneMinute(t)

		conn, status, br := sendUpgrade(t, base, "websocket")
		defer conn.Close()
		if server == "fasthttp" {
			if status != 200 {
				t.Fatalf("status %d, want the origin's 200 to an ordinary request", status)
			}
			return
		}
		if status != 101 {
			t.Fatalf("status %d, want 101", status)
		}
		io.WriteString(conn, "hello\n")
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if line, err := br.ReadString('\n'); err != nil || line != "hello\n" {
			t.Fatalf("echo %q, %v", line, err)
		}
		start := time.Now()
		if n, err := br.Read(make([]byte, 1)); err == nil {
			t.Fatalf("read %d bytes from a silent origin", n)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the switched connection of a silent origin was still open after 10 s")
		}
		if took := time.Since(start); took < 290*time.Millisecond {
			t.Errorf("closed after %v, before the read timeout of 300ms", took)
		}
		select {
		case err := <-originEnded:
			if err != nil {
				t.Errorf("the origin's side ended with %v, want the connection closed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the origin's side of the switched connection was still open after 10 s")
		}

		// The limit counts upgrades: two more are switched, the fourth is
		// refused.
		for i := 2; i <= 4; i++ {
			c, status, _ := sendUpgrade(t, base, "WebSocket")
			c.Close()
			if want := map[bool]int{true: 101, false: 429}[i <= 3]; status != want {
				t.Errorf("upgrade %d: status %d, want %d", i, status, want)
			}
		}
		stops[t.Name()]()
		b, err := os.ReadFile(decisionsFile)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var d responseLine
			if err := json.Unmarshal([]byte(line), &d); err != nil {
				t.Fatal(err)
			}
			got = append(got, d.Outcome+" "+strconv.Itoa(d.Status))
		}
		// A switched request's decision is written when its connection
		// ends, so the refusal may come before the last two.
		slices.Sort(got)
		if want := []string{"allow 101", "allow 101", "allow 101", "block 429"}; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("decisions %v, want %v", got, want)
		}
	})
}

// sendUpgrade sends a request to switch to protocol (the Upgrade
// header's value) to the edge at base on a new connection and reads the response's status line and headers.
func sendUpgrade(t *testing.T, base, protocol string) (net.Conn, int, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET /chat HTTP/1.1\r\nHost: example.test\r\nConnection: Upgrade\r\nUpgrade: "+protocol+"\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 {
		resp.Body.Close()
	}
	return conn, resp.StatusCode, br
}

// TestEdgeUpgradeOnlyWebSocket asks the edge, in front of an origin that
// switches to any protocol it is asked for, to switch to protocols other
// than WebSocket. A switched connection is a tunnel the limiter no longer
// sees into: switched to h2c (HTTP/2 without TLS), it would carry any
// number of requests to the origin past every limit, on one counted
// request ("h2c smuggling"). So the origin never sees such an Upgrade and
// answers an ordinary request, under both servers, whatever else the
// header lists.
func TestEdgeUpgradeOnlyWebSocket(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		dir := t.TempDir()
		cfgPath := filepath.Join(dir, "edge.yaml")
		cfg := strings.Replace(strings.Replace(upgradeYAML, "SERVER", server, 1), "limit: 3", "limit: 100", 1)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		seen := make(chan string, 16)
		origin := switchingOrigin(t, seen, func(net.Conn, *bufio.ReadWriter) {})
		defer origin.Close()
		base, _ := startEdge(t, bin, nil, "--config", cfgPath, "--upstream", origin.URL)
		for _, protocol := range []string{"h2c", "H2C", "test", "websocket, h2c", "h2c, websocket", "websocket h2c", "websocket/13", ""} {
			conn, status, _ := sendUpgrade(t, base, protocol)
			conn.Close()
			if status != 200 {
				t.Errorf("Upgrade: %q: status %d, want the origin's 200 to an ordinary request", protocol, status)
			}
			select {
			case up := <-seen:
				if up != "" {
					t.Errorf("Upgrade: %q: the origin was asked to switch to %q", protocol, up)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("Upgrade: %q: the origin saw no request", protocol)
			}
		}
	})
}

// switchingOrigin is an origin that switches to whatever protocol a
// request asks for (sending each request's Upgrade, "" for none, to seen
// when it is not nil), then hands the connection to tunnel, and closes it
// after; a request without Upgrade gets "no upgrade".
func switchingOrigin(t *testing.T, seen chan<- string, tunnel func(net.Conn, *bufio.ReadWriter)) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up := r.Header.Get("Upgrade")
		if seen != nil {
			seen <- up
		}
		if up == "" {
			io.WriteString(w, "no upgrade")
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + up + "\r\n\r\n")
		rw.Flush()
		tunnel(conn, rw)
	}))
}
