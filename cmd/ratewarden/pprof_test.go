package main

import (
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
