package main

import (
	"strings"
	"testing"
	"time"
)

// The shape `go tool pprof -traces` prints: each sample's value, then its
// frames leaf first.
const traces = `File: ratewarden
Type: cpu
-----------+-------------------------------------------------------
      30ms   internal/runtime/syscall/linux.Syscall6
             syscall.Syscall
             internal/poll.(*FD).Write
             net/http.(*persistConn).writeLoop
-----------+-------------------------------------------------------
      20ms   runtime.memclrNoHeapPointers
             runtime.mallocgc
             net/http/httputil.(*ReverseProxy).copyBuffer
-----------+-------------------------------------------------------
      10ms   net/http.Header.Clone
             net/http/httputil.(*ReverseProxy).ServeHTTP
             net/http.(*conn).serve
-----------+-------------------------------------------------------
      10ms   github.com/ratewarden/ratewarden/decisions.AppendJSON
             github.com/ratewarden/ratewarden/edge.(*Limiter).emit
         bytes:[64]
-----------+-------------------------------------------------------
       5ms   net/http.(*conn).readRequest
             net/http.(*conn).serve
-----------+-------------------------------------------------------
`

func TestSplit(t *testing.T) {
	got, all, err := split(strings.NewReader(traces))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{
		"syscalls":                      30 * time.Millisecond,
		"GC and allocation":             20 * time.Millisecond,
		"header copies":                 10 * time.Millisecond,
		"decision encoding and writing": 10 * time.Millisecond,
		"net/http server":               5 * time.Millisecond,
	}
	if all != 75*time.Millisecond {
		t.Errorf("total %v; want 75ms", all)
	}
	if len(got) != len(want) {
		t.Errorf("groups %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v; want %v", k, got[k], v)
		}
	}
}

func TestSplitRejectsGarbage(t *testing.T) {
	if _, _, err := split(strings.NewReader("-----------+---\n  lots   of\n")); err == nil {
		t.Fatal("a sample without a duration was accepted")
	}
}
