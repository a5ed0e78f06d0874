package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"time"
)

// listenPprof serves the Go runtime's profiles (net/http/pprof) on addr,
// which must be a loopback address: they expose the process's memory and
// are for profiling on the machine itself (tests/profile-edge). It returns
// the server to shut down.
func listenPprof(addr string, errc chan<- error) (*http.Server, net.Addr, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--pprof-listen %q: %v; want a loopback address such as 127.0.0.1:6060", addr, err)
	}
	if a, err := netip.ParseAddr(host); err != nil || !a.IsLoopback() {
		return nil, nil, fmt.Errorf("--pprof-listen %q: not a loopback address; want 127.0.0.1:PORT or [::1]:PORT", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--pprof-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { errc <- srv.Serve(ln) }()
	return srv, ln.Addr(), nil
}
