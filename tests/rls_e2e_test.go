package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
)

// rlsCall is one request as Envoy's remote_address and request_headers
// (:path) actions describe it.
func rlsCall(ip, path string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "remote_address", Value: ip}}},
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "path", Value: path}}},
	}}
}

func dialRLS(t testing.TB, addr string) (*grpc.ClientConn, rlsv3.RateLimitServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, rlsv3.NewRateLimitServiceClient(conn)
}

// TestRLSBinary runs `ratewarden rls` on the seed configuration as shipped
// and as an Envoy deployment reaches it: the seed's /api/reports table,
// gRPC health SERVING, and on SIGINT a clean exit with every decision in
// the log.
func TestRLSBinary(t *testing.T) {
	bin := buildBinary(t)
	file := filepath.Join(t.TempDir(), "decisions.jsonl")
	cmd := exec.Command(bin, "rls", "--config", "../examples/seed.yaml", "--listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--decisions-file", file)
	cmd.Env = append(os.Environ(), "RATEWARDEN_CHALLENGE_KEYS=", "RATEWARDEN_VERIFIER_SECRET=")
	base, admin := startEdgeCommand(t, cmd)
	conn, client := dialRLS(t, strings.TrimPrefix(base, "http://"))
	hr, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hr, err)
	}
	var got []string
	for range 12 {
		r, err := client.ShouldRateLimit(context.Background(), rlsCall("192.0.2.7", "/api/reports"))
		if err != nil {
			t.Fatal(err)
		}
		var decision string
		for _, h := range r.GetResponseHeadersToAdd() {
			if h.GetKey() == "x-ratewarden-decision" {
				decision = h.GetValue()
			}
		}
		got = append(got, r.GetOverallCode().String()+"/"+decision)
	}
	want := strings.TrimSpace(strings.Repeat("OK/allow ", 5) + strings.Repeat("OVER_LIMIT/challenge ", 5) + "OVER_LIMIT/block OVER_LIMIT/block")
	if strings.Join(got, " ") != want {
		t.Errorf("calls %v", got)
	}
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "ratewarden_rls_calls_total") {
		t.Error("/metrics lacks ratewarden_rls_calls_total")
	}
	stops[t.Name()]()
	if ds := readDecisionLines(t, file); len(ds) != 12 {
		t.Errorf("%d decisions for 12 calls", len(ds))
	}
}

// BenchmarkRLS measures the rate limit service's cost per decision, over
// the memory store and over a Redis of the benchmark's own, with the
// seed's tiers, the decision log on (Arrow, decisions.dir) and anonymous
// clients rotating over 100,000 addresses, each under its limits:
//
//   - inprocess: the service's ShouldRateLimit called directly, as the
//     gRPC server calls it (the decision, the store round trips, the
//     response); cpu-µs/decision is getrusage(RUSAGE_SELF) over the run.
//   - grpc: `ratewarden rls` as its own process, called over one gRPC
//     connection on loopback by 16 concurrent callers (Envoy multiplexes
//     its calls the same way); cpu-µs/decision is the server process's
//     CPU time (utime+stime, /proc/PID/stat) over the run.
//
// On Redis (store.redis.batch false and true; then with batched counting,
// store.sync.max_error 0.05), evalsha/decision is the
// EVALSHA calls Redis counted over the run, store-rt/decision the round
// trips (Redis's read system calls) and redis-cpu-µs/decision Redis's own
// CPU time. Path "/" counts under the global rule only (one
// round trip, as a one-descriptor envoyproxy/ratelimit call);
// "/api/search" under a path rule too (two).
func BenchmarkRLS(b *testing.B) {
	bin := buildBinary(b)
	var rds *benchRedisServer
	stores := []struct{ name, yaml string }{
		{"memory", "store:\n  type: memory\n"},
		{"redis", "batch: false}\n"},
		{"redis-batch", "batch: true}\n"},
		// Batched counting: hits far below a limit counted locally, sent
		// every second.
		{"redis-sync", "batch: true}\n  sync: {max_error: 0.05}\n"},
	}
	peer := os.Getenv("RATEWARDEN_BENCH_ENVOY_RATELIMIT")
	if peer == "" {
		b.Log("envoyproxy/ratelimit not measured: RATEWARDEN_BENCH_ENVOY_RATELIMIT is not set (tests/bench-rls sets it)")
	}
	for _, st := range stores {
		for _, path := range []string{"/", "/api/search"} {
			name := st.name + "/" + strings.ReplaceAll(strings.TrimPrefix(path, "/"), "/", "_")
			yaml := func() string {
				if st.name == "memory" {
					return st.yaml
				}
				if rds == nil {
					rds = benchRedis(b)
				}
				return fmt.Sprintf("store:\n  type: redis\n  timeout: 1s\n  redis: {addrs: [%q], prefix: \"rlsb-%d:\", %s", rds.addr, time.Now().UnixNano(), st.yaml)
			}
			b.Run("inprocess/"+name, func(b *testing.B) {
				cfgFile := benchConfig(b, yaml())
				cfg, err := config.Load(cfgFile)
				if err != nil {
					b.Fatal(err)
				}
				s, err := assemble.NewRLS(context.Background(), cfg, assemble.Options{Getenv: func(string) string { return "" }})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close(context.Background())
				var next atomic.Uint64
				before, rbefore := selfCPU(), rds.stats(b, st.name)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := s.Service.ShouldRateLimit(context.Background(), rlsCall(rotating(next.Add(1)), path)); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				reportCPU(b, selfCPU()-before, rbefore, rds.stats(b, st.name))
			})
			b.Run("grpc/"+name, func(b *testing.B) {
				cfgFile := benchConfig(b, yaml())
				addr, cpu := startRLSProcess(b, bin, cfgFile)
				_, client := dialRLS(b, addr)
				// Warm up: connections, scripts, the first segment.
				for i := range 1000 {
					client.ShouldRateLimit(context.Background(), rlsCall(rotating(uint64(i)), path))
				}
				var next atomic.Uint64
				next.Store(1000)
				before, rbefore := cpu(), rds.stats(b, st.name)
				b.ReportAllocs()
				b.SetParallelism(8)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := client.ShouldRateLimit(context.Background(), rlsCall(rotating(next.Add(1)), path)); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				reportCPU(b, cpu()-before, rbefore, rds.stats(b, st.name))
			})
			if peer == "" || st.name != "redis" {
				continue
			}
			// The peer, as shipped, on the same Redis, asked the same
			// question the way its configuration is written: one
			// descriptor per counter.
			yaml() // starts the benchmark's Redis if no leg has yet
			b.Run("grpc/envoy-ratelimit/"+name, func(b *testing.B) {
				addr, cpu := startEnvoyRatelimit(b, peer, rds.addr)
				_, client := dialRLS(b, addr)
				for i := range 1000 {
					if _, err := client.ShouldRateLimit(context.Background(), peerCall(rotating(uint64(i)), path)); err != nil {
						b.Fatal(err)
					}
				}
				var next atomic.Uint64
				next.Store(1000)
				before, rbefore := cpu(), rds.stats(b, "peer")
				b.ReportAllocs()
				b.SetParallelism(8)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						resp, err := client.ShouldRateLimit(context.Background(), peerCall(rotating(next.Add(1)), path))
						if err != nil {
							b.Error(err)
							return
						}
						if resp.OverallCode != rlsv3.RateLimitResponse_OK {
							b.Errorf("envoyproxy/ratelimit refused a rotating client: %v", resp)
							return
						}
					}
				})
				b.StopTimer()
				reportCPU(b, cpu()-before, rbefore, rds.stats(b, "peer"))
			})
		}
	}
}

// peerRules are the seed's anonymous limits in envoyproxy/ratelimit's
// configuration: 60 a minute per client address, and 30 a minute per
// client address on /api/search.
const peerRules = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 60}
    descriptors:
      - key: path
        value: /api/search
        rate_limit: {unit: minute, requests_per_unit: 30}
`

// peerCall is what Envoy sends envoyproxy/ratelimit for the seed's rules:
// the client's global descriptor and, on /api/search, the client's path
// descriptor, both counted in one Redis pipeline.
func peerCall(ip, path string) *rlsv3.RateLimitRequest {
	addr := &rlcommon.RateLimitDescriptor_Entry{Key: "remote_address", Value: ip}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{addr}},
	}}
	if path == "/api/search" {
		req.Descriptors = append(req.Descriptors, &rlcommon.RateLimitDescriptor{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{addr, {Key: "path", Value: path}}})
	}
	return req
}

// startEnvoyRatelimit runs envoyproxy/ratelimit's service (bin) with
// peerRules on the Redis at redisAddr, every listener on loopback, and
// returns its gRPC address and a reader of its CPU time so far.
func startEnvoyRatelimit(b *testing.B, bin, redisAddr string) (string, func() time.Duration) {
	root := b.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", "edge.yaml"), []byte(peerRules), 0o600); err != nil {
		b.Fatal(err)
	}
	grpcPort := freePort(b)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", fmt.Sprintf("PORT=%d", freePort(b)),
		"GRPC_HOST=127.0.0.1", fmt.Sprintf("GRPC_PORT=%d", grpcPort),
		"DEBUG_HOST=127.0.0.1", fmt.Sprintf("DEBUG_PORT=%d", freePort(b)),
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", grpcPort)
	conn, client := dialRLS(b, addr)
	defer conn.Close()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := client.ShouldRateLimit(ctx, peerCall("10.0.0.1", "/"))
		cancel()
		if err == nil {
			break
		}
		if i > 300 {
			b.Fatalf("envoyproxy/ratelimit did not answer: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	pid := cmd.Process.Pid
	return addr, func() time.Duration { return procCPU(b, pid) }
}

// rotating is the i-th client address, over 100,000.
func rotating(i uint64) string {
	i %= 100_000
	return "10." + strconv.FormatUint(i>>16, 10) + "." + strconv.FormatUint(i>>8&255, 10) + "." + strconv.FormatUint(i&255, 10)
}

// benchConfig writes the seed configuration with store in place of its
// memory store and the decision log on, and returns its path.
func benchConfig(b *testing.B, store string) string {
	seed, err := os.ReadFile("../examples/seed.yaml")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cfg := strings.Replace(string(seed), "store:\n  type: memory\n", store, 1) +
		"\ndecisions:\n  dir: " + filepath.Join(dir, "log") + "\n"
	path := filepath.Join(dir, "rls.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

var rlsListenRE = regexp.MustCompile(`msg="rate limit service listening" addr=(\S+)`)

// startRLSProcess runs `ratewarden rls --config cfg` and returns its
// address and a reader of its CPU time so far.
func startRLSProcess(b *testing.B, bin, cfg string) (string, func() time.Duration) {
	cmd := exec.Command(bin, "rls", "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "off")
	cmd.Env = append(os.Environ(), "RATEWARDEN_CHALLENGE_KEYS=", "RATEWARDEN_VERIFIER_SECRET=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	addr := make(chan string, 1)
	var logs strings.Builder
	var mu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := rlsListenRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		pid := cmd.Process.Pid
		return a, func() time.Duration { return procCPU(b, pid) }
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		b.Fatalf("rls did not start\n%s", logs.String())
	}
	return "", nil
}

// procCPU is the user and system CPU time of process pid, from
// /proc/PID/stat (the accounting getrusage reads, in clock ticks).
func procCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name may hold spaces: fields count from after its ")".
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks
}

// selfCPU is this process's user and system CPU time, from getrusage.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchRedisServer is a redis-server of the benchmark's own, so that its
// counters and CPU time are the benchmark's alone.
type benchRedisServer struct {
	addr   string
	pid    int
	client *redis.Client
}

func benchRedis(b *testing.B) *benchRedisServer {
	bin := program(b, "redis-server", "tests/run (apt-get install redis-server)")
	port := freePort(b)
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := &benchRedisServer{addr: fmt.Sprintf("127.0.0.1:%d", port), pid: cmd.Process.Pid}
	r.client = redis.NewClient(&redis.Options{Addr: r.addr})
	b.Cleanup(func() { r.client.Close() })
	for i := 0; r.client.Ping(context.Background()).Err() != nil; i++ {
		if i > 500 {
			b.Fatal("redis-server did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r
}

// redisStats are what a run compares of Redis: EVALSHA calls and Redis's
// CPU time (INFO), and its read system calls (/proc/PID/io syscr): Redis
// reads a connection once per batch of requests that arrived together,
// so every round trip costs one read, however many calls it carries.
type redisStats struct {
	evalsha int64
	reads   int64
	cpu     time.Duration
}

var (
	evalshaRE = regexp.MustCompile(`cmdstat_evalsha:calls=(\d+)`)
	cpuRE     = regexp.MustCompile(`used_cpu_(?:sys|user):([\d.]+)`)
	syscrRE   = regexp.MustCompile(`(?m)^syscr: (\d+)$`)
)

// stats reads the figures; the zero value for the memory store.
func (r *benchRedisServer) stats(b *testing.B, store string) redisStats {
	if r == nil || store == "memory" {
		return redisStats{}
	}
	// INFO is one read of its own: taken before /proc is read, it is not
	// counted in the run.
	info, err := r.client.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var s redisStats
	if m := evalshaRE.FindStringSubmatch(info); m != nil {
		s.evalsha, _ = strconv.ParseInt(m[1], 10, 64)
	}
	for _, m := range cpuRE.FindAllStringSubmatch(info, 2) {
		sec, _ := strconv.ParseFloat(m[1], 64)
		s.cpu += time.Duration(sec * float64(time.Second))
	}
	io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", r.pid))
	if err != nil {
		b.Fatal(err)
	}
	if m := syscrRE.FindSubmatch(io); m != nil {
		s.reads, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	return s
}

// report adds the per-decision figures of a run of b.N decisions.
func reportCPU(b *testing.B, cpu time.Duration, before, after redisStats) {
	n := float64(b.N)
	b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/decision")
	if after != (redisStats{}) {
		b.ReportMetric(float64(after.evalsha-before.evalsha)/n, "evalsha/decision")
		// One read is the INFO of the closing figures.
		b.ReportMetric(float64(after.reads-before.reads-1)/n, "store-rt/decision")
		b.ReportMetric(float64((after.cpu-before.cpu).Microseconds())/n, "redis-cpu-µs/decision")
	}
}
