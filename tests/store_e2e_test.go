package tests

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/edge/dynamostore"
)

// TestEdgesShareAStore runs two `ratewarden edge` processes, one on each
// edge.server, on the seed's tiers with a distributed store, Redis and
// DynamoDB in turn, and sends one client's /api/reports requests to them
// alternately: the two count
// together, so the seed's table (5 allowed, 5 challenged, then blocked)
// holds across both, as it would behind one load balancer.
func TestEdgesShareAStore(t *testing.T) {
	bin := buildBinary(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer origin.Close()
	seed := seedYAML(t, "[127.0.0.1]")
	f := func(name, store string, env []string) {
		t.Run(name+"/four_edges_64_clients", func(t *testing.T) {
			cfg := strings.Replace(seed, "store:\n  type: memory\n", store, 1)
			path := filepath.Join(t.TempDir(), "edge.yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			env := append(env, "RATEWARDEN_CHALLENGE_KEYS=", "RATEWARDEN_VERIFIER_SECRET=")
			var edges []string
			for i := range 4 {
				// Both edge servers, side by side on one store.
				server := config.EdgeServers[i%len(config.EdgeServers)]
				base, _ := startEdge(t, bin, env, "--server", server, "--config", path, "--upstream", origin.URL)
				edges = append(edges, base)
			}
			// One anonymous client, 256 concurrent /api/search requests
			// spread over four edges: the seed allows 30 a minute, challenges
			// up to 60 (factor 2), and blocks the rest, whoever counts.
			ip := fmt.Sprintf("198.18.%d.%d", time.Now().UnixNano()%250, time.Now().UnixNano()/250%250+1)
			inOneMinute(t)
			client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
				Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			var mu sync.Mutex
			got := map[int]int{}
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					for i := range 4 {
						req, _ := http.NewRequest("GET", edges[(g+i)%4]+"/api/search", nil)
						req.Header.Set("X-Forwarded-For", ip)
						resp, err := client.Do(req)
						if err != nil {
							t.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						mu.Lock()
						got[resp.StatusCode]++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if got[200] != 30 || got[302] != 30 || got[429] != 196 {
				t.Errorf("statuses across four edges %v; want exactly 30 allowed, 30 challenged, 196 blocked", got)
			}
		})
		t.Run(name, func(t *testing.T) {
			cfg := strings.Replace(seed, "store:\n  type: memory\n", store, 1)
			if cfg == seed {
				t.Fatal("seed.yaml has no store section to replace")
			}
			path := filepath.Join(t.TempDir(), "edge.yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			env = append(env, "RATEWARDEN_CHALLENGE_KEYS=", "RATEWARDEN_VERIFIER_SECRET=")
			// One edge on each server: they count together.
			a, _ := startEdge(t, bin, env, "--server", "net/http", "--config", path, "--upstream", origin.URL)
			b, _ := startEdge(t, bin, env, "--server", "fasthttp", "--config", path, "--upstream", origin.URL)
			client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			// A client address of its own, so that reruns of the test in a
			// minute's window do not share counts.
			ip := fmt.Sprintf("192.0.2.%d", time.Now().UnixNano()%250+1)
			var statuses []int
			inOneMinute(t)
			for i := range 12 {
				base := a
				if i%2 == 1 {
					base = b
				}
				statuses = append(statuses, get(t, client, base+"/api/reports", "X-Forwarded-For", ip).status)
			}
			if got := fmt.Sprint(statuses); got != "[200 200 200 200 200 302 302 302 302 302 429 429]" {
				t.Errorf("statuses across two edges %s", got)
			}
		})
	}
	redisAddr := awstest.Endpoint(t, awstest.RedisEnv)
	// A generous store deadline: these tests are about counting, and on a
	// loaded machine a 50 ms deadline would fail requests open.
	f("redis", fmt.Sprintf("store:\n  type: redis\n  timeout: 5s\n  redis: {addrs: [%q], prefix: \"e2e-%d:\"}\n", redisAddr, time.Now().UnixNano()), nil)

	dep := awstest.Endpoint(t, awstest.DynamoDBEnv)
	dc := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(dep) })
	table := fmt.Sprintf("e2e-counters-%d", time.Now().UnixNano())
	awstest.CreateTable(t, dc, dynamostore.TableSpec(table))
	f("dynamodb", fmt.Sprintf("store:\n  type: dynamodb\n  timeout: 5s\n  dynamodb: {table: %s, endpoint: %q, read_after_condition_failure: true}\n", table, dep),
		[]string{"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test"})
}

// inOneMinute waits, when less than 10 s of the current minute is left,
// for the next one: the seed's limits count in fixed windows aligned to
// the minute, so a burst that crossed a boundary would start a second
// budget (it did: 60 allowed and 60 challenged where the seed's table
// allows 30 and 30, and six requests for /api//reports all allowed where
// the seed allows five).
func inOneMinute(t *testing.T) {
	t.Helper()
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 10*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
}
