package kinesis

import (
	"math/big"
	"testing"

	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

func TestHashKeys(t *testing.T) {
	q := new(big.Int).Lsh(big.NewInt(1), 125) // an eighth of the range
	f := func(n int, eighths ...int64) {
		t.Helper()
		got := hashKeys(n)
		for i, e := range eighths {
			if want := new(big.Int).Mul(q, big.NewInt(e)).String(); got[i] != want {
				t.Errorf("hashKeys(%d)[%d] = %s, want %d/8 of the range, %s", n, i, got[i], e, want)
			}
		}
	}
	f(1, 4)
	f(2, 2, 6)
	f(4, 1, 3, 5, 7)
}

// TestKinesisShardSpread writes generator events to streams of 4 and 8
// shards with as many partitions, and to 4 shards with 8 partitions whose
// first shard is then split: every open shard gets records, and each
// partition key (so each identity) is on one shard only, or, across the
// split, on the parent and then one child.
func TestKinesisShardSpread(t *testing.T) {
	kc := client(t, endpoint(t))
	f := func(name string, shards int32, partitions int, split bool) {
		t.Run(name, func(t *testing.T) {
			stream := newStream(t, kc, shards)
			s, err := New(kc, Options{Stream: stream, Partitions: partitions})
			if err != nil {
				t.Fatal(err)
			}
			g := decisiontest.NewGenerator(41, start)
			if err := s.WriteBatch(g.Batch(2000)); err != nil {
				t.Fatal(err)
			}
			var parent string
			if split {
				parent = splitShard(t, kc, stream)
				if err := s.WriteBatch(g.Batch(2000)); err != nil {
					t.Fatal(err)
				}
			}
			byShard, err := readShards(kc, stream)
			if err != nil {
				t.Fatal(err)
			}
			keyShards := map[string]map[string]bool{}
			for _, sh := range byShard {
				id := *sh.shard.ShardId
				if len(sh.records) == 0 {
					t.Errorf("shard %s got no records", id)
				}
				for _, r := range sh.records {
					if keyShards[*r.PartitionKey] == nil {
						keyShards[*r.PartitionKey] = map[string]bool{}
					}
					keyShards[*r.PartitionKey][id] = true
				}
				t.Logf("%s: %d records", id, len(sh.records))
			}
			if len(keyShards) != partitions {
				t.Errorf("%d partition keys on the stream, want %d", len(keyShards), partitions)
			}
			for k, on := range keyShards {
				delete(on, parent)
				if len(on) != 1 {
					t.Errorf("partition %s on %d shards (besides a split parent), want 1: %v", k, len(on), on)
				}
			}
		})
	}
	f("4_shards", 4, 4, false)
	f("8_shards", 8, 8, false)
	f("split", 4, 8, true)
}

// TestKinesisJSONPacking: in JSON mode a call carries a record of every
// identity waiting, up to 500, so that calls number about the most events
// one identity has in the batch, not a batch per partition key.
func TestKinesisJSONPacking(t *testing.T) {
	ds := decisiontest.NewGenerator(42, start).Batch(1024)
	most := 0
	per := map[uint32]int{}
	for i := range ds {
		h, _ := identity(&ds[i])
		per[h]++
		most = max(most, per[h])
	}
	api, s := sendFake(t, Options{JSON: true}, ds)
	calls := len(api.calls)
	t.Logf("%d calls for %d decisions of %d identities, at most %d of one identity", calls, len(ds), len(per), most)
	if calls < most || calls > most+len(ds)/maxCallRecords {
		t.Errorf("%d calls, want %d to %d", calls, most, most+len(ds)/maxCallRecords)
	}
	checkPerKey(t, ds, s.opts.Partitions, byKey(t, api.delivered))
}
