package aggregator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratewarden/ratewarden/decisions/stream"
	"github.com/ratewarden/ratewarden/internal/ddbtable"
)

// The state table holds each partition's State, encoded as a state file
// is, under a head item and, when it is larger than one item may be, in
// chunks:
//
//	partition (S, hash key)   "<prefix>/<partition>"
//	item      (S, range key)  "head", or "<generation>.<i>" for chunk i
//	gen       (N)             head: the generation, bumped by every save
//	chunks    (N)             head: 0 when data holds the whole state,
//	                          else the number of chunk items
//	data      (B)             head or chunk: the state's bytes, or a piece
//
// A save writes the chunks of the next generation first, then the head,
// conditioned on the generation this store last read or wrote: a worker
// whose shard was taken over and saved by another fails its save instead
// of overwriting the newer state. The chunks of the previous generation
// are deleted after; those of a save that crashed before its head are
// overwritten by the next save, which uses the same generation (a chunk
// whose delete failed stays, unread, until the table is cleared).
const (
	stateAttrPartition = "partition"
	stateAttrItem      = "item"
	stateAttrGen       = "gen"
	stateAttrChunks    = "chunks"
	stateAttrData      = "data"
	stateHead          = "head"
)

// ErrStateMoved is returned by StateTable.Save and StateDir.Save when
// another store saved the partition since this one last read or wrote
// it: the shard has another holder, or had one while the lease changed
// hands. It wraps stream.ErrReopen: the source opens the partition again
// (loading the other's state) or, its lease gone, stops reading it.
var ErrStateMoved = fmt.Errorf("state saved by another holder since it was read: %w", stream.ErrReopen)

// StateTableSpec returns the CreateTable input of a state table named
// name: the key schema above, billed per request.
func StateTableSpec(name string) *dynamodb.CreateTableInput {
	return ddbtable.HashRange(name, stateAttrPartition, stateAttrItem)
}

// StateTableAPI is the part of the DynamoDB client a StateTable (and a
// PartialsTable) uses. *dynamodb.Client satisfies it.
type StateTableAPI = ddbtable.API

// StateTable keeps each partition's state in a DynamoDB table (see
// StateTableSpec), for aggregators on several machines. Prefix names the
// consumer group and stream, so that one table serves many. A StateTable
// is safe for concurrent use; it remembers the generation of each
// partition it read or wrote.
type StateTable struct {
	API    StateTableAPI
	Table  string
	Prefix string
	// Timeout bounds each call; default 10s.
	Timeout time.Duration

	mu   sync.Mutex
	seen map[string]stateHeadInfo // by partition
}

var (
	_ StateStore = (*StateTable)(nil)
	_ stateNamer = (*StateTable)(nil)
)

type stateHeadInfo struct {
	gen, chunks int64
}

func (s *StateTable) key(partition, item string) map[string]ddb.AttributeValue {
	return map[string]ddb.AttributeValue{
		stateAttrPartition: &ddb.AttributeValueMemberS{Value: s.Prefix + "/" + partition},
		stateAttrItem:      &ddb.AttributeValueMemberS{Value: item},
	}
}

func chunkItem(gen, i int64) string {
	return strconv.FormatInt(gen, 10) + "." + strconv.FormatInt(i, 10)
}

// calls makes the table's calls: bounded by Timeout, not cut short when
// ctx is done, and retried with backoff when throttled (ddbtable.Calls).
func (s *StateTable) calls() *ddbtable.Calls {
	return &ddbtable.Calls{API: s.API, Table: s.Table, Timeout: s.Timeout}
}

func (s *StateTable) get(ctx context.Context, partition, item string) (map[string]ddb.AttributeValue, error) {
	return s.calls().Get(ctx, s.key(partition, item))
}

// Load reads the partition's head and chunks. A chunk found missing
// because another holder saved the next generation meanwhile (and
// deleted the chunks read from) has the state read again, as long as the
// generation moves (up to loadRetries times: each is another save); one
// missing under an unchanged head is an error.
func (s *StateTable) Load(ctx context.Context, partition string) (State, bool, error) {
	for try := 0; ; try++ {
		st, ok, err := s.load(ctx, partition)
		var torn *tornState
		if !errors.As(err, &torn) {
			return st, ok, err
		}
		gen, gerr := s.generation(ctx, partition)
		if gerr != nil {
			return State{}, false, gerr
		}
		if try == loadRetries || gen == 0 || gen == torn.gen {
			return State{}, false, s.stateError(partition, err)
		}
	}
}

// loadRetries bounds the loads again of a state whose generation moved
// while it was read. A holder saves twice a batch (with its outputs
// pending, then without them), so a load may meet two saves in a row;
// a loaded machine makes a load as long as several.
const loadRetries = 100

// tornState is a chunk of the generation gen found missing.
type tornState struct{ chunk, gen int64 }

func (e *tornState) Error() string {
	return fmt.Sprintf("chunk %d of generation %d is missing", e.chunk, e.gen)
}

// load is one read of Load.
func (s *StateTable) load(ctx context.Context, partition string) (State, bool, error) {
	head, err := s.get(ctx, partition, stateHead)
	if err != nil {
		return State{}, false, fmt.Errorf("load state %s: %w", partition, err)
	}
	if head == nil {
		s.remember(partition, stateHeadInfo{})
		return State{}, false, nil
	}
	h := stateHeadInfo{gen: ddbtable.Num(head, stateAttrGen), chunks: ddbtable.Num(head, stateAttrChunks)}
	b := ddbtable.Bytes(head, stateAttrData)
	for i := range h.chunks {
		it, err := s.get(ctx, partition, chunkItem(h.gen, i))
		if err != nil {
			return State{}, false, fmt.Errorf("load state %s: %w", partition, err)
		}
		if it == nil {
			return State{}, false, &tornState{i, h.gen}
		}
		b = append(b, ddbtable.Bytes(it, stateAttrData)...)
	}
	st, err := decodeState(b)
	if err != nil {
		return State{}, false, s.stateError(partition, fmt.Errorf("generation %d: %w", h.gen, err))
	}
	s.remember(partition, h)
	return st, true, nil
}

// moved reports whether another store saved the partition since this one
// last read or wrote it (what Save checks), from the head's generation
// alone (see stateWatcher).
func (s *StateTable) moved(ctx context.Context, partition string) (bool, error) {
	gen, err := s.generation(ctx, partition)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return gen != s.seen[partition].gen, nil
}

// generation returns the generation of the partition's state, 0 for none,
// reading its head's generation alone.
func (s *StateTable) generation(ctx context.Context, partition string) (int64, error) {
	head, err := s.calls().Get(ctx, s.key(partition, stateHead), stateAttrGen)
	if err != nil {
		return 0, fmt.Errorf("load state %s: %w", partition, err)
	}
	if head == nil {
		return 0, nil
	}
	return ddbtable.Num(head, stateAttrGen), nil
}

// stateError says that err is an error of the partition's state: it
// names the table and the key of the state's items.
func (s *StateTable) stateError(partition string, err error) error {
	return fmt.Errorf("state in table %s, key %s %q: %w", s.Table, stateAttrPartition, s.Prefix+"/"+partition, err)
}

func (s *StateTable) remember(partition string, h stateHeadInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]stateHeadInfo{}
	}
	s.seen[partition] = h
}

// Save writes the partition's state as the next generation. It fails with
// ErrStateMoved if another store saved the partition since this one last
// loaded or saved it (or, never having loaded it, if it exists).
func (s *StateTable) Save(ctx context.Context, partition string, st State) error {
	b, err := appendState(stateBuf(nil, st), st)
	if err != nil {
		return err
	}
	s.mu.Lock()
	prev, known := s.seen[partition]
	s.mu.Unlock()
	h := stateHeadInfo{gen: prev.gen + 1}
	head := s.key(partition, stateHead)
	head[stateAttrGen] = &ddb.AttributeValueMemberN{Value: strconv.FormatInt(h.gen, 10)}
	calls := s.calls()
	b, h.chunks, err = calls.PutChunks(ctx, b, stateAttrData, func(i int64) map[string]ddb.AttributeValue {
		return s.key(partition, chunkItem(h.gen, i))
	})
	if err != nil {
		return fmt.Errorf("save state %s: %w", partition, err)
	}
	if b != nil {
		head[stateAttrData] = &ddb.AttributeValueMemberB{Value: b}
	}
	head[stateAttrChunks] = &ddb.AttributeValueMemberN{Value: strconv.FormatInt(h.chunks, 10)}
	in := &dynamodb.PutItemInput{Item: head, ExpressionAttributeNames: map[string]string{"#g": stateAttrGen}}
	if known && prev.gen > 0 {
		in.ConditionExpression = aws.String("#g = :g")
		in.ExpressionAttributeValues = map[string]ddb.AttributeValue{":g": &ddb.AttributeValueMemberN{Value: strconv.FormatInt(prev.gen, 10)}}
	} else {
		in.ConditionExpression = aws.String("attribute_not_exists(#g)")
	}
	_, err = calls.Put(ctx, in)
	var cf *ddb.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return fmt.Errorf("save state %s: %w", partition, ErrStateMoved)
	}
	if err != nil {
		return fmt.Errorf("save state %s: %w", partition, err)
	}
	s.remember(partition, h)
	// The previous generation's chunks are garbage now.
	for i := range prev.chunks {
		calls.Delete(ctx, s.key(partition, chunkItem(prev.gen, i)))
	}
	return nil
}
