package aggregator

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratewarden/ratewarden/internal/ddbtable"
)

// The partials table holds one head item per output, keyed as a
// PartialsDir names its file, and bucketed by window length and UTC day so
// that the partials of any time range are a Query per day:
//
//	window (S, hash key)   "<window>/<YYYY-MM-DD>", such as "1m0s/2026-12-01"
//	output (S, range key)  "<start>.<partition>.<from>-<to>": start in Unix
//	                       nanoseconds, zero-padded to 19 digits so that the
//	                       key sorts by window start; chunk i of a head is
//	                       "<head's output>#<gen>.<i>"
//	start (N), partition (S), range (S)   head: the output's identity
//	gen (S)      head: a hash of the partial's bytes
//	chunks (N)   head: 0 when data holds the whole partial, else the
//	             number of chunk items
//	data (B)     head or chunk: the partial's encoding, or a piece
//
// and, per window length, an index of the days written:
//
//	window "<window>/days", output "<YYYY-MM-DD>"
//
// and an index of the window lengths written, so that a reader given
// another length can say which the table holds (tables written before it
// lack it; their lengths are found only when asked for):
//
//	window "lengths", output "<window>"
//
// "All partials of windows of length W that start in [T1, T2)" is then one
// Query of the day index and, per day, one Query of
// window = "W/<day>" AND output BETWEEN "<T1>" AND "<T2>" (the bound T2
// alone sorts before every output starting at T2). A day bucket keeps
// each partition key's items to 1440 windows × the partitions at 60 s
// windows, spreading a long history over many partition keys.
//
// A rerun of an output writes the same head key, so it replaces the head:
// the table, like the directory, keeps the last delivery. Chunks are
// keyed by the hash of the bytes they hold: a rerun with the same bytes
// rewrites them in place, and one whose bytes differ (a newer encoding)
// writes new chunks before its head and deletes the old head's after, so
// that a reader never assembles pieces of two deliveries.
const (
	partialsAttrWindow    = "window"
	partialsAttrOutput    = "output"
	partialsAttrStart     = "start"
	partialsAttrPartition = "partition"
	partialsAttrRange     = "range"
	partialsAttrGen       = "gen"
	partialsAttrChunks    = "chunks"
	partialsAttrData      = "data"
	partialsDaysKey       = "days"
	partialsLengthsKey    = "lengths"
)

// PartialsTableSpec returns the CreateTable input of a partials table
// named name: the key schema above, billed per request.
func PartialsTableSpec(name string) *dynamodb.CreateTableInput {
	return ddbtable.HashRange(name, partialsAttrWindow, partialsAttrOutput)
}

// PartialsTable stores partials in a DynamoDB table (see
// PartialsTableSpec), for aggregators and readers on several machines: one
// PutItem per output (and a chunk item per 350 KiB beyond the first), a
// Query per day read. It writes and reads what a PartialsDir does, with
// the same keys, so either serves every reader (MergePartials). Each call
// is bounded by Timeout and retried with backoff when throttled
// (ddbtable.Calls). A PartialsTable is safe for concurrent use; API and
// Table are required.
type PartialsTable struct {
	API   StateTableAPI
	Table string
	// Timeout bounds each call; default 10s.
	Timeout time.Duration

	mu   sync.Mutex
	days map[string]bool // day index items written, by hash key + day; and lengths indexed, by length
}

var (
	_ Sink           = (*PartialsTable)(nil)
	_ PartialsWalker = (*PartialsTable)(nil)
)

func (s *PartialsTable) calls() *ddbtable.Calls {
	return &ddbtable.Calls{API: s.API, Table: s.Table, Timeout: s.Timeout}
}

func partialsKey(window, output string) map[string]ddb.AttributeValue {
	return map[string]ddb.AttributeValue{
		partialsAttrWindow: &ddb.AttributeValueMemberS{Value: window},
		partialsAttrOutput: &ddb.AttributeValueMemberS{Value: output},
	}
}

// partialsStartKey is the output key's prefix of a window start: Unix
// nanoseconds, zero-padded to sort as numbers do.
func partialsStartKey(t time.Time) string {
	return fmt.Sprintf("%019d", t.UnixNano())
}

func partialsChunkKey(head, gen string, i int64) string {
	return head + "#" + gen + "." + strconv.FormatInt(i, 10)
}

// Write stores o's partial, replacing an earlier delivery of the same
// output.
func (s *PartialsTable) Write(ctx context.Context, partition string, o Output) error {
	if err := checkPartition(partition); err != nil {
		return err
	}
	p := o.Partial
	if p.Start.UnixNano() < 0 {
		return fmt.Errorf("store partial: window start %v: want 1970 or later", p.Start)
	}
	b, err := p.AppendBinary(nil)
	if err != nil {
		return err
	}
	size, day := p.Size.String(), p.Start.UTC().Format(time.DateOnly)
	if err := s.markDay(ctx, size, day); err != nil {
		return err
	}
	window := size + "/" + day
	output := partialsStartKey(p.Start) + "." + partition + "." + o.RangeKey()
	h := fnv.New64a()
	h.Write(b)
	gen := strconv.FormatUint(h.Sum64(), 16)
	calls := s.calls()
	data, chunks, err := calls.PutChunks(ctx, b, partialsAttrData, func(i int64) map[string]ddb.AttributeValue {
		return partialsKey(window, partialsChunkKey(output, gen, i))
	})
	if err != nil {
		return fmt.Errorf("store partial %s %s: %w", window, output, err)
	}
	head := partialsKey(window, output)
	head[partialsAttrStart] = &ddb.AttributeValueMemberN{Value: strconv.FormatInt(p.Start.UnixNano(), 10)}
	head[partialsAttrPartition] = &ddb.AttributeValueMemberS{Value: partition}
	head[partialsAttrRange] = &ddb.AttributeValueMemberS{Value: o.RangeKey()}
	head[partialsAttrGen] = &ddb.AttributeValueMemberS{Value: gen}
	head[partialsAttrChunks] = &ddb.AttributeValueMemberN{Value: strconv.FormatInt(chunks, 10)}
	if data != nil {
		head[partialsAttrData] = &ddb.AttributeValueMemberB{Value: data}
	}
	old, err := calls.Put(ctx, &dynamodb.PutItemInput{Item: head, ReturnValues: ddb.ReturnValueAllOld})
	if err != nil {
		return fmt.Errorf("store partial %s %s: %w", window, output, err)
	}
	// The chunks of a delivery whose bytes differed are garbage now; one
	// whose delete fails stays, unread.
	if oldGen := ddbtable.Str(old.Attributes, partialsAttrGen); oldGen != gen {
		for i := range ddbtable.Num(old.Attributes, partialsAttrChunks) {
			calls.Delete(ctx, partialsKey(window, partialsChunkKey(output, oldGen, i)))
		}
	}
	return nil
}

// markDay writes the day index item of size's day once per store.
func (s *PartialsTable) markDay(ctx context.Context, size, day string) error {
	k := size + "/" + day
	s.mu.Lock()
	done, known := s.days[k], s.days[size]
	s.mu.Unlock()
	if done {
		return nil
	}
	if !known {
		if _, err := s.calls().Put(ctx, &dynamodb.PutItemInput{Item: partialsKey(partialsLengthsKey, size)}); err != nil {
			return fmt.Errorf("store partial: lengths index %s: %w", size, err)
		}
	}
	if _, err := s.calls().Put(ctx, &dynamodb.PutItemInput{Item: partialsKey(size+"/"+partialsDaysKey, day)}); err != nil {
		return fmt.Errorf("store partial: day index %s: %w", k, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.days == nil {
		s.days = map[string]bool{}
	}
	s.days[size], s.days[k] = true, true
	return nil
}

// HasWindow checks that the table holds partials of windows of size, as
// PartialsDir.HasWindow checks a directory: when not, the error names the
// table, size and the lengths its index holds, and is ErrNoPartials when
// that index holds none (nothing was written, or only before the index).
func (s *PartialsTable) HasWindow(ctx context.Context, size time.Duration) error {
	calls := s.calls()
	var found bool
	day := partialsAt(size.String() + "/" + partialsDaysKey)
	day.Limit = aws.Int32(1)
	err := calls.Query(ctx, day, func(items []map[string]ddb.AttributeValue) error {
		found = found || len(items) > 0
		return nil
	})
	if err != nil {
		return fmt.Errorf("partials table %s: %w", s.Table, err)
	}
	if found {
		return nil
	}
	var sizes []string
	err = calls.Query(ctx, partialsAt(partialsLengthsKey), func(items []map[string]ddb.AttributeValue) error {
		for _, it := range items {
			// The length asked, indexed by a writer killed before its
			// first day, holds nothing yet.
			if w := ddbtable.Str(it, partialsAttrOutput); w != size.String() {
				sizes = append(sizes, w)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("partials table %s: %w", s.Table, err)
	}
	return noWindow("partials table "+s.Table, size, sizes)
}

// Flush does nothing: every Write is durable when it returns.
func (s *PartialsTable) Flush(context.Context) error { return nil }

// Read merges the partials of windows of length size that start in
// [from, to), by window start; items that cannot be read are skipped and
// reported (see MergePartials).
func (s *PartialsTable) Read(ctx context.Context, size time.Duration, from, to time.Time) (map[time.Time]*Partial, []ReadProblem, error) {
	return MergePartials(ctx, s, size, from, to)
}

// partialsLast is the last day the table's keys can name.
var partialsLast = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// Walk calls fn with every stored partial of windows of length size that
// start in [from, to), by day, then window start, partition and range;
// items that cannot be read are skipped and reported, named
// "dynamodb:<table>/<window>/<output>".
func (s *PartialsTable) Walk(ctx context.Context, size time.Duration, from, to time.Time, fn func(PartialFile, *Partial)) ([]ReadProblem, error) {
	from, to = from.UTC(), to.UTC()
	if from.Before(time.Unix(0, 0)) {
		from = time.Unix(0, 0).UTC()
	}
	if to.After(partialsLast) {
		to = partialsLast
	}
	if !from.Before(to) {
		return nil, nil
	}
	calls := s.calls()
	var days []string
	err := calls.Query(ctx, partialsBetween(size.String()+"/"+partialsDaysKey, from.Format(time.DateOnly), to.Add(-1).Format(time.DateOnly)), func(items []map[string]ddb.AttributeValue) error {
		for _, it := range items {
			days = append(days, ddbtable.Str(it, partialsAttrOutput))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read partials %s: day index: %w", s.Table, err)
	}
	var problems []ReadProblem
	for _, day := range days {
		window := size.String() + "/" + day
		items := map[string]map[string]ddb.AttributeValue{}
		var heads []string
		err := calls.Query(ctx, partialsBetween(window, partialsStartKey(from), partialsStartKey(to)), func(page []map[string]ddb.AttributeValue) error {
			for _, it := range page {
				k := ddbtable.Str(it, partialsAttrOutput)
				items[k] = it
				if _, ok := it[partialsAttrGen]; ok {
					heads = append(heads, k)
				}
			}
			return nil
		})
		if err != nil {
			return problems, fmt.Errorf("read partials %s: %s: %w", s.Table, window, err)
		}
		slices.Sort(heads)
		for _, k := range heads {
			path := "dynamodb:" + s.Table + "/" + window + "/" + k
			f, p, err := s.assemble(items, items[k], size)
			if err != nil {
				problems = append(problems, ReadProblem{path, err})
				continue
			}
			f.Path = path
			fn(f, p)
		}
	}
	return problems, nil
}

// partialsBetween is the Query of the items of hash key window whose
// output key is in [lo, hi].
func partialsBetween(window, lo, hi string) *dynamodb.QueryInput {
	return &dynamodb.QueryInput{
		KeyConditionExpression:   aws.String("#w = :w AND #o BETWEEN :a AND :b"),
		ExpressionAttributeNames: map[string]string{"#w": partialsAttrWindow, "#o": partialsAttrOutput},
		ExpressionAttributeValues: map[string]ddb.AttributeValue{
			":w": &ddb.AttributeValueMemberS{Value: window},
			":a": &ddb.AttributeValueMemberS{Value: lo},
			":b": &ddb.AttributeValueMemberS{Value: hi},
		},
	}
}

// partialsAt is the Query of the items of hash key window.
func partialsAt(window string) *dynamodb.QueryInput {
	return &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#w = :w"),
		ExpressionAttributeNames:  map[string]string{"#w": partialsAttrWindow},
		ExpressionAttributeValues: map[string]ddb.AttributeValue{":w": &ddb.AttributeValueMemberS{Value: window}},
	}
}

// assemble decodes the partial of head, whose chunks are in items.
func (s *PartialsTable) assemble(items map[string]map[string]ddb.AttributeValue, head map[string]ddb.AttributeValue, size time.Duration) (PartialFile, *Partial, error) {
	k := ddbtable.Str(head, partialsAttrOutput)
	gen, chunks := ddbtable.Str(head, partialsAttrGen), ddbtable.Num(head, partialsAttrChunks)
	f := PartialFile{Start: time.Unix(0, ddbtable.Num(head, partialsAttrStart)).UTC(),
		Partition: ddbtable.Str(head, partialsAttrPartition), Range: ddbtable.Str(head, partialsAttrRange)}
	if f.Partition == "" || f.Range == "" || k != partialsStartKey(f.Start)+"."+f.Partition+"."+f.Range {
		return f, nil, errors.New("not a partial's item: its start, partition and range do not name its key")
	}
	b := ddbtable.Bytes(head, partialsAttrData)
	for i := range chunks {
		c := items[partialsChunkKey(k, gen, i)]
		if c == nil {
			return f, nil, fmt.Errorf("chunk %d of %d is missing", i, chunks)
		}
		b = append(b, ddbtable.Bytes(c, partialsAttrData)...)
	}
	p, err := DecodePartial(b)
	if err == nil && (!p.Start.Equal(f.Start) || p.Size != size) {
		err = fmt.Errorf("holds the window %v+%v", p.Start, p.Size)
	}
	return f, p, err
}
