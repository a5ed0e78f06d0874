package main

import (
	"net"
	"net/http"
	"strings"
	"testing"
)

// Profiles expose the process's memory: only a loopback address is taken.
func TestPprofListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", ":0", "10.0.0.1:0", "localhost:0", "127.0.0.1"} {
		if srv, _, err := listenPprof(addr, make(chan error, 1)); err == nil {
			srv.Close()
			t.Errorf("listenPprof(%q) served; want an error", addr)
		} else if !strings.Contains(err.Error(), "--pprof-listen") {
			t.Errorf("listenPprof(%q): %v; want the error to name the flag", addr, err)
		}
	}
	srv, addr, err := listenPprof("127.0.0.1:0", make(chan error, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get("http://" + addr.String() + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /debug/pprof/cmdline: %s", resp.Status)
	}
}

// TestPprofLoopbackHostOnly: a page the operator visits can point its own
// name at 127.0.0.1 and so reach the listener from the browser (DNS
// rebinding), but it cannot choose the Host header: only loopback host
// names are answered, as by the dashboard.
func TestPprofLoopbackHostOnly(t *testing.T) {
	srv, addr, err := listenPprof("127.0.0.1:0", make(chan error, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	_, port, _ := net.SplitHostPort(addr.String())
	for _, c := range []struct {
		host string
		code int
	}{
		{"attacker.example:6060", http.StatusMisdirectedRequest},
		{"attacker.example", http.StatusMisdirectedRequest},
		{"127.0.0.1.nip.io:" + port, http.StatusMisdirectedRequest},
		{"127.0.0.1:" + port, http.StatusOK},
		{"localhost:" + port, http.StatusOK},
		{"[::1]:" + port, http.StatusOK},
	} {
		for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=2", "/debug/pprof/heap"} {
			req, _ := http.NewRequest("GET", "http://"+addr.String()+path, nil)
			req.Host = c.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Errorf("GET %s with Host %q: %s, want %d", path, c.host, resp.Status, c.code)
			}
		}
	}
}
