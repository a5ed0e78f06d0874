package awstest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Throttler is a proxy in front of dynalite that answers the first n
// calls of each of its operations with the throttling error DynamoDB
// sends (ProvisionedThroughputExceededException, as DynamoDB's JSON
// protocol has it) and forwards the rest. It is safe for concurrent use.
type Throttler struct {
	URL string // the proxy's endpoint

	n     int64
	mu    sync.Mutex
	calls map[string]int64
}

// ThrottleDynamoDB starts a Throttler for the operations ops (such as
// "PutItem") with n throttled calls each; it stops when the test ends.
func ThrottleDynamoDB(t testing.TB, n int64, ops ...string) *Throttler {
	t.Helper()
	target, err := url.Parse(Endpoint(t, DynamoDBEnv))
	if err != nil {
		t.Fatal(err)
	}
	th := &Throttler{n: n, calls: map[string]int64{}}
	for _, op := range ops {
		th.calls[op] = 0
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if th.throttle(r.Header.Get("X-Amz-Target")) {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded."}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	th.URL = srv.URL
	return th
}

// throttle counts a call of target ("DynamoDB_20120810.<op>") and reports
// whether it is to be throttled.
func (th *Throttler) throttle(target string) bool {
	op, ok := strings.CutPrefix(target, "DynamoDB_20120810.")
	if !ok {
		return false
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	n, ok := th.calls[op]
	if !ok {
		return false
	}
	th.calls[op] = n + 1
	return n < th.n
}

// Calls returns how many calls of op the proxy has seen, throttled or not.
func (th *Throttler) Calls(op string) int64 {
	th.mu.Lock()
	defer th.mu.Unlock()
	return th.calls[op]
}
