package rls

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/edge"
)

func TestCurrentLimit(t *testing.T) {
	f := func(window time.Duration, unit rlsv3.RateLimitResponse_RateLimit_Unit, mult uint32) {
		t.Helper()
		rl := currentLimit(&edge.Policy{Name: "r", Limit: 7, Window: window})
		if rl.GetUnit() != unit || rl.GetUnitMultiplier().GetValue() != mult || rl.GetRequestsPerUnit() != 7 {
			t.Errorf("window %v: %v, want unit %v multiplier %d", window, rl, unit, mult)
		}
	}
	f(time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND, 0)
	f(10*time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND, 10)
	f(time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0)
	f(90*time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND, 90)
	f(2*time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR, 2)
	f(24*time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY, 0)
	f(1500*time.Millisecond, rlsv3.RateLimitResponse_RateLimit_SECOND, 2)
	f(0, rlsv3.RateLimitResponse_RateLimit_UNKNOWN, 0) // concurrency
}

func newService(t testing.TB) *Service {
	t.Helper()
	cfg, err := config.Parse([]byte(`
challenge: {enabled: true}
rls: {max_descriptors: 16, max_entries: 8, descriptors: [{key: header_match, value: reports, path: /api/reports}]}
tiers:
  anonymous:
    global: {limit: 100}
    paths:
      /api/reports: {limit: 5}
      /api/slots: {limit: 2, algorithm: concurrency}
`), "rls.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	l, err := edge.New(cfg, edge.Options{Env: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return New(l, Options{})
}

func entries(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestMappedDescriptorAndConcurrency: an entry rls.descriptors maps counts
// under its path's rule; a concurrency rule's slot is given back at the
// end of the call, so calls one after another never exhaust it.
func TestMappedDescriptorAndConcurrency(t *testing.T) {
	s := newService(t)
	call := func(d ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		r, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: d})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := call(entries("remote_address", "192.0.2.1"), entries("header_match", "reports"))
	if n := r.GetStatuses()[0].GetCurrentLimit().GetName(); n != "anonymous:/api/reports" {
		t.Errorf("mapped entry counted under %q", n)
	}
	for i := range 5 {
		r = call(entries("remote_address", "192.0.2.2", "path", "/api/slots/x"))
		if r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("concurrency call %d: %v", i, r)
		}
	}
}

// FuzzShouldRateLimit feeds arbitrary messages to the service: whatever
// decodes is answered without panic, with one status per descriptor.
func FuzzShouldRateLimit(f *testing.F) {
	seed, _ := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*rlcommon.RateLimitDescriptor{
		entries("remote_address", "192.0.2.1", "path", "/api/reports?x", "user", "u", "plan", "pro"),
		entries("header_match", "reports", "challenge_token", "abc"),
	}})
	f.Add(seed)
	f.Add([]byte{})
	s := newService(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		resp, err := s.ShouldRateLimit(context.Background(), &req)
		if err != nil {
			return
		}
		if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
		}
	})
}

// sinkFunc is an edge.Sink of a function.
type sinkFunc func(decisions.Decision) bool

func (f sinkFunc) Emit(d decisions.Decision) bool { return f(d) }

// TestRejectedCallIsReadable: a call refused for its domain, 64 control
// characters that the reason quotes four bytes each, is recorded with a
// reason of at most decisions.MaxNameLen bytes, so that the record that
// holds it, and the other clients' decisions in it, can be read. Before,
// its reason of 316 bytes made every reader refuse the whole record.
func TestRejectedCallIsReadable(t *testing.T) {
	cfg, err := config.Parse([]byte("rls: {domains: [edge]}\ntiers: {anonymous: {global: {limit: 100}}}\n"), "rls.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var ds []decisions.Decision
	l, err := edge.New(cfg, edge.Options{Env: func(string) string { return "" },
		Sink: sinkFunc(func(d decisions.Decision) bool { ds = append(ds, d); return true })})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	s := New(l, Options{})
	for _, domain := range []string{"edge", strings.Repeat("\x01", 64), "edge"} {
		s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{
			entries("remote_address", "192.0.2.1", "path", "/x")}})
	}
	if len(ds) != 3 || ds[1].Outcome != decisions.Rejected {
		t.Fatalf("decisions %+v, want three, the second rejected", ds)
	}
	if err := ds[1].Check(); err != nil || !utf8.ValidString(ds[1].Reason) || !strings.HasPrefix(ds[1].Reason, "invalid rate limit call: rate limit domain is not served: ") {
		t.Errorf("reason %q (%d bytes): %v", ds[1].Reason, len(ds[1].Reason), err)
	}
	b, err := columnar.NewEncoder(columnar.Options{}).Encode(nil, ds)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := columnar.DecodeRecord(append([]byte{byte(columnar.CodecArrow)}, b...), nil); err != nil || len(got) != 3 {
		t.Errorf("the record of the three decodes to %d: %v", len(got), err)
	}
}
