package tests

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/edge/limit/limittest"
	"github.com/ratewarden/ratewarden/edge/redisstore"
)

// TestRedisCluster runs the store conformance suite against a real
// three-node Redis Cluster: every script touches one key, in one hash
// slot, so each hit is one round trip whatever node owns its slot. The keys
// end up on every node.
func TestRedisCluster(t *testing.T) {
	bin := program(t, "redis-server", "tests/run (apt-get install redis-server)")
	cli := program(t, "redis-cli", "tests/run (apt-get install redis-server)")
	dir := t.TempDir()
	var addrs []string
	for i := range 3 {
		p := startProcess(t, fmt.Sprint("redis-cluster-", i), func(port int) []string {
			return []string{bin, "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no",
				"--daemonize", "no", "--loglevel", "warning", "--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)), "--dir", dir}
		}, redisPing)
		addrs = append(addrs, p.addr)
	}
	out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx := context.Background()
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		deadline := time.Now().Add(30 * time.Second)
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s: cluster not ok: %v\n%s", a, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	limittest.Run(t, func(t *testing.T) limittest.Store {
		s, err := redisstore.New(redisstore.Options{Client: client, Clock: redisstore.CallerTime, ClockSkew: redisstore.MaxClockSkew})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		n, err := c.DBSize(ctx).Result()
		c.Close()
		if err != nil || n == 0 {
			t.Errorf("node %s holds %d keys (%v): want the keys spread over every node", a, n, err)
		}
	}
}

// TestStartProcessPortTaken: a Redis Cluster node whose bus port is taken
// accepts connections on its own port, then exits; startProcess does not
// take that for serving, and starts it again on other ports.
func TestStartProcessPortTaken(t *testing.T) {
	bin := program(t, "redis-server", "tests/run (apt-get install redis-server)")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	var buses []int
	p := startProcess(t, "redis-bus-taken", func(port int) []string {
		bus := taken.Addr().(*net.TCPAddr).Port // the first start's bus port is in use
		if len(buses) > 0 {
			bus = freePort(t)
		}
		buses = append(buses, bus)
		return []string{bin, "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no",
			"--daemonize", "no", "--loglevel", "warning", "--cluster-enabled", "yes", "--cluster-port", fmt.Sprint(bus),
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)), "--dir", dir}
	}, redisPing)
	if len(buses) != 2 {
		t.Errorf("started %d times (bus ports %v), want twice: once on the taken bus port, then on another", len(buses), buses)
	}
	if err := redisPing(p.addr); err != nil {
		t.Errorf("the node startProcess returned does not serve: %v\n%s", err, p.output())
	}
}
