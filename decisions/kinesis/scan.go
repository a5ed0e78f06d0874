package kinesis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/stream"
	"github.com/ratewarden/ratewarden/internal/awserr"
	"github.com/ratewarden/ratewarden/internal/backoff"
)

// ScanOptions configure Scan.
type ScanOptions struct {
	StartAt StartAt       // TrimHorizon (default) or Latest
	Follow  bool          // keep reading new records until ctx is done
	Poll    time.Duration // wait between reads of a caught-up shard; default 1s
	// Discover is how often a following Scan lists the shards again, to
	// read those a reshard created; default 10s.
	Discover time.Duration
	// Corrupt is called for each record that cannot be decoded, which is
	// skipped, and for each CloudWatch Logs record with log events that are
	// not decisions (err is a *columnar.CorruptEventsError), whose
	// decisions are handed over all the same; it may be nil.
	Corrupt func(shard, seq string, err error)
}

// Scan reads a stream without leases or checkpoints, for a person looking
// at it: every shard, parents before their children, handing each
// record's events to h in order, a batch of decoded Events per record.
// Without Follow it reads the shards one after another and returns once
// each is caught up; with Follow it reads them all at once until ctx is
// done, and every Discover lists the shards again to read those created
// since (a new shard is read from its start, whatever StartAt says: its
// records are all new).
//
// Each shard is read from its start, or from StartAt. h keeps no position:
// Scan commits nothing. Its calls are serial, for every shard. An error
// from h ends the Scan.
func Scan(ctx context.Context, api StreamAPI, name string, opts ScanOptions, h stream.HandleFunc) error {
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Discover <= 0 {
		opts.Discover = 10 * time.Second
	}
	shards, err := listShards(ctx, api, name)
	if err != nil {
		return fmt.Errorf("scan %s: %w", name, err)
	}
	if !opts.Follow {
		for _, sh := range lineage(shards) {
			if err := scanShard(ctx, api, name, aws.ToString(sh.ShardId), opts.StartAt, opts, h); err != nil {
				return err
			}
		}
		return nil
	}
	// Following, every shard is read at once, a child once its parents
	// end; h is called by one goroutine at a time.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   sync.WaitGroup
		emu  sync.Mutex
		errs []error
		done = map[string]chan struct{}{} // by shard, closed when its read ends
		hmu  sync.Mutex
	)
	locked := func(ctx context.Context, b *stream.Batch) error {
		hmu.Lock()
		defer hmu.Unlock()
		return h(ctx, b)
	}
	startAt := opts.StartAt
	tick := time.NewTicker(opts.Discover)
	defer tick.Stop()
	for {
		for _, sh := range lineage(shards) {
			id := aws.ToString(sh.ShardId)
			if done[id] != nil {
				continue
			}
			finished := make(chan struct{})
			done[id] = finished
			var waits []chan struct{}
			for _, p := range shardParents(sh) {
				if done[p] != nil {
					waits = append(waits, done[p])
				}
			}
			from := startAt
			wg.Go(func() {
				defer close(finished)
				for _, w := range waits {
					select {
					case <-w:
					case <-ctx.Done():
						return
					}
				}
				if err := scanShard(ctx, api, name, id, from, opts, locked); err != nil {
					emu.Lock()
					errs = append(errs, err)
					emu.Unlock()
					cancel()
				}
			})
		}
		// Shards found later were created after Scan began: every record
		// of theirs is new.
		startAt = TrimHorizon
		select {
		case <-ctx.Done():
			wg.Wait()
			return errors.Join(errs...)
		case <-tick.C:
		}
		if more, err := listShards(ctx, api, name); err == nil {
			shards = more
		}
	}
}

// lineage orders shards so that every shard comes after its parents.
func lineage(shards []types.Shard) []types.Shard {
	slices.SortFunc(shards, func(a, b types.Shard) int { return compareShardIDs(aws.ToString(a.ShardId), aws.ToString(b.ShardId)) })
	done := map[string]bool{}
	known := map[string]bool{}
	for _, sh := range shards {
		known[aws.ToString(sh.ShardId)] = true
	}
	ready := func(p *string) bool { return p == nil || !known[*p] || done[*p] }
	out := make([]types.Shard, 0, len(shards))
	for len(out) < len(shards) {
		progress := false
		for _, sh := range shards {
			id := aws.ToString(sh.ShardId)
			if done[id] || !ready(sh.ParentShardId) || !ready(sh.AdjacentParentShardId) {
				continue
			}
			done[id] = true
			out = append(out, sh)
			progress = true
		}
		if !progress { // a cycle cannot happen; keep the rest in id order
			for _, sh := range shards {
				if !done[aws.ToString(sh.ShardId)] {
					out = append(out, sh)
				}
			}
		}
	}
	return out
}

// scanTries is how many calls in a row of a Scan's GetRecords may fail,
// each in a way that may pass (awserr.Retryable, throttling aside),
// before the Scan ends with the error: each after the SDK's own retries.
const scanTries = 5

// scanShard reads one shard for Scan.
func scanShard(ctx context.Context, api StreamAPI, name, shard string, startAt StartAt, opts ScanOptions, h stream.HandleFunc) error {
	it, err := api.GetShardIterator(ctx, iteratorAt(name, shard, stream.Position{}, startAt))
	if err != nil {
		return fmt.Errorf("scan %s: %w", shard, err)
	}
	iter := it.ShardIterator
	var buf []decisions.Decision
	dec := columnar.NewDecoder()
	fails := 0
	for iter != nil {
		out, err := api.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			// Throttling waits as long as it lasts; a call that fails in
			// another way that may pass (an answer lost to the transport,
			// a server fault) is made up to scanTries times in a row
			// before its error ends the Scan, so that a person reading the stream is not stopped by
			// one lost answer, nor left waiting on one that never comes.
			throttled := awserr.IsThrottle(err)
			if !throttled {
				fails++
			}
			if throttled || fails < scanTries && awserr.Retryable(err) {
				if err := backoff.Sleep(ctx, opts.Poll); err != nil {
					return nil
				}
				continue
			}
			return fmt.Errorf("scan %s: %w", shard, err)
		}
		fails = 0
		for _, r := range out.Records {
			seq := aws.ToString(r.SequenceNumber)
			buf, err = dec.DecodeRecord(r.Data, buf[:0])
			if err != nil {
				if opts.Corrupt != nil {
					opts.Corrupt(shard, seq, err)
				}
				if _, partial := columnar.IsCorruptEvents(err); !partial {
					continue
				}
			}
			if len(buf) == 0 {
				continue
			}
			b := stream.Batch{Partition: shard, From: stream.Position{Seq: seq},
				To: stream.Position{Seq: seq, Sub: wholeRecord}, Events: buf}
			if err := h(ctx, &b); err != nil {
				return err
			}
		}
		iter = out.NextShardIterator
		if len(out.Records) == 0 && aws.ToInt64(out.MillisBehindLatest) == 0 && iter != nil {
			if !opts.Follow {
				return nil
			}
			if err := backoff.Sleep(ctx, opts.Poll); err != nil {
				return nil
			}
		}
	}
	return nil
}
