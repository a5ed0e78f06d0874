package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"time"

	"github.com/ratewarden/ratewarden/internal/loopback"
)

// listenPprof serves the Go runtime's profiles (net/http/pprof) on addr,
// which must be a loopback address: they expose the process's memory and
// are for profiling on the machine itself (tests/profile-edge). Only
// requests addressed to a loopback host name are answered, as by the
// dashboard: a page the operator visits cannot read the profiles by
// pointing its own name at 127.0.0.1 (DNS rebinding). It returns the
// server to shut down.
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
	guard := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopback.Host(r.Host) {
			http.Error(w, "pprof answers only to a loopback host name (127.0.0.1, [::1], localhost)", http.StatusMisdirectedRequest)
			return
		}
		mux.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: guard, ReadHeaderTimeout: 10 * time.Second}
	go func() { errc <- srv.Serve(ln) }()
	return srv, ln.Addr(), nil
}
