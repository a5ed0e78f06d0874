package kinesis

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/stream"
)

// TestScan reads a split stream whole, parents before children, and skips
// and reports a record that is not a decision batch.
func TestScan(t *testing.T) {
	kc := client(t, endpoint(t))
	name := newStream(t, kc, 1)
	w := newWriter(t, kc, name)
	w.write(t, 700)
	ctx := context.Background()
	parent := splitShard(t, kc, name)
	w.write(t, 700)
	if _, err := kc.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(name), PartitionKey: aws.String("x"), Data: []byte("garbage")}); err != nil {
		t.Fatal(err)
	}
	for _, follow := range []bool{false, true} {
		t.Run(fmt.Sprint("follow=", follow), func(t *testing.T) {
			seen := newSeenLog()
			h := seen.handler("scan")
			var corrupt atomic.Int64
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var shardsSeen []string
			err := Scan(sctx, kc, name, ScanOptions{Follow: follow, Poll: 20 * time.Millisecond,
				Corrupt: func(string, string, error) {
					if corrupt.Add(1) == 1 && seen.count() == 1400 {
						cancel()
					}
				}},
				stream.HandleFunc(func(ctx context.Context, b *stream.Batch) error {
					if len(shardsSeen) == 0 || shardsSeen[len(shardsSeen)-1] != b.Partition {
						shardsSeen = append(shardsSeen, b.Partition)
					}
					h(ctx, b)
					if seen.count() == 1400 && corrupt.Load() == 1 {
						cancel()
					}
					return nil
				}))
			if err != nil {
				t.Fatal(err)
			}
			if seen.count() != 1400 || corrupt.Load() != 1 {
				t.Fatalf("read %d events and %d corrupt records, want 1400 and 1", seen.count(), corrupt.Load())
			}
			seen.checkOrder(t)
			if shardsSeen[0] != parent {
				t.Fatalf("shards read in order %v: want the parent first", shardsSeen)
			}
		})
	}
}

// TestScanFollowFindsNewShards follows a one-shard stream, splits it, and
// reads the events written to the children, which did not exist when
// Scan began.
func TestScanFollowFindsNewShards(t *testing.T) {
	kc := client(t, endpoint(t))
	name := newStream(t, kc, 1)
	w := newWriter(t, kc, name)
	w.write(t, 300)
	seen := newSeenLog()
	h := seen.handler("scan")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Scan(ctx, kc, name, ScanOptions{Follow: true, Poll: 20 * time.Millisecond, Discover: 50 * time.Millisecond},
			h)
	}()
	waitFor(t, "the first 300 events", func() bool { return seen.count() == 300 })
	splitShard(t, kc, name)
	w.write(t, 300) // on the children
	waitFor(t, "the 300 events on the children", func() bool { return seen.count() == 600 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	seen.checkOrder(t)
}

// TestScanLogsRecords: Scan hands over the decisions of a CloudWatch Logs
// record and reports its log events that are not decisions; a control
// message holds none and is no corruption.
func TestScanLogsRecords(t *testing.T) {
	kc := client(t, endpoint(t))
	name := newStream(t, kc, 1)
	ds := decisiontest.NewGenerator(44, start).Batch(2)
	ctx := context.Background()
	for _, data := range [][]byte{
		decisiontest.LogsRecord("CONTROL_MESSAGE", 1772366430250, "CWL CONTROL MESSAGE: Checking health of destination Kinesis stream."),
		decisiontest.LogsRecord("DATA_MESSAGE", 1772366430250, decisiontest.LambdaLine(string(decisions.AppendJSON(nil, &ds[0]))),
			"REPORT RequestId: 1\tDuration: 2.00 ms\n", decisiontest.LambdaJSONLine(string(decisions.AppendJSON(nil, &ds[1])))),
	} {
		if _, err := kc.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(name), PartitionKey: aws.String("x"), Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	var got []decisions.Decision
	var bad []int
	err := Scan(ctx, kc, name, ScanOptions{Corrupt: func(_, _ string, err error) {
		n, _ := columnar.IsCorruptEvents(err)
		bad = append(bad, n)
	}}, stream.HandleFunc(func(_ context.Context, b *stream.Batch) error {
		got = append(got, b.Events...)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || fmt.Sprint(bad) != "[1]" {
		t.Fatalf("%d decisions, corrupt reports %v; want 2 and [1]", len(got), bad)
	}
	for i := range got {
		if d := decisiontest.Diff(got[i], ds[i]); d != "" {
			t.Errorf("decision %d:\n%s", i, d)
		}
	}
}

// TestScanGoesOnAfterCutAnswers reads a stream through a proxy that cuts
// the answers of GetRecords calls short: a 200 whose body stops midway
// and whose connection closes, the shape of an answer lost to the
// transport (the SDK's own retries included, the call fails). Scan tries
// again and reads every event; the same cut on every call ends it with
// the error, rather than spinning for ever.
func TestScanGoesOnAfterCutAnswers(t *testing.T) {
	ep := endpoint(t)
	kc := client(t, ep)
	name := newStream(t, kc, 1)
	newWriter(t, kc, name).write(t, 300)
	target, err := url.Parse(ep)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cuts int64 // GetRecords calls cut, the SDK's attempts counted
		fail bool
	}{{4, false}, {1 << 20, true}} {
		var cut atomic.Int64
		pass := httputil.NewSingleHostReverseProxy(target)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Amz-Target") != "Kinesis_20131202.GetRecords" || cut.Add(1) > c.cuts {
				pass.ServeHTTP(w, r)
				return
			}
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-amz-json-1.1")
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(200)
			io.WriteString(w, `{"Records":[`)
			w.(http.Flusher).Flush()
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
		}))
		seen := newSeenLog()
		err := Scan(context.Background(), client(t, srv.URL), name, ScanOptions{Poll: 10 * time.Millisecond}, seen.handler("scan"))
		srv.Close()
		if c.fail {
			if err == nil || seen.count() != 0 {
				t.Errorf("every answer cut: read %d events, error %v; want none and an error", seen.count(), err)
			}
			continue
		}
		if err != nil || seen.count() != 300 {
			t.Errorf("%d answers cut: read %d events, error %v; want 300", c.cuts, seen.count(), err)
		}
		seen.checkOrder(t)
	}
}
