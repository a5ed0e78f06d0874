package aggregator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/atomicfile"
)

// Sink receives a Rollup's outputs. Writing the same output twice (same
// partition, window and sequence range) must leave the same result as
// writing it once, or carry the same idempotency key: after a crash the
// aggregator delivers again what it cannot prove was delivered. Flush makes
// what was written durable.
type Sink interface {
	Write(ctx context.Context, partition string, o Output) error
	Flush(ctx context.Context) error
}

// PartialsDir stores partials as files under a directory, one per output:
//
//	<dir>/<window>/<YYYY-MM-DD>/<start>.<partition>.<from>-<to>.rwp
//
// where window is the window length (such as 1m0s), start the window's start
// in Unix nanoseconds, and from-to the output's sequence range, so that a
// rerun of the same output replaces its file and a correction sits beside
// its window. Each file is replaced whole (atomicfile). It is safe for
// concurrent use.
type PartialsDir struct {
	Dir string
}

var (
	_ Sink           = (*PartialsDir)(nil)
	_ PartialsWalker = (*PartialsDir)(nil)
)

// partialsExt ends every partial file's name.
const partialsExt = ".rwp"

func (s *PartialsDir) path(partition string, o Output) string {
	p := o.Partial
	name := strconv.FormatInt(p.Start.UnixNano(), 10) + "." + partition + "." + o.RangeKey() + partialsExt
	return filepath.Join(s.Dir, p.Size.String(), p.Start.UTC().Format(time.DateOnly), name)
}

// Write stores o's partial.
func (s *PartialsDir) Write(_ context.Context, partition string, o Output) error {
	if err := checkPartition(partition); err != nil {
		return err
	}
	b, err := o.Partial.AppendBinary(nil)
	if err != nil {
		return err
	}
	path := s.path(partition, o)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("store partial: %w", err)
	}
	return atomicfile.Write(path, b, 0o644)
}

// removeLeftovers removes the temporary files that writes of outs'
// partial files, cut short by a crash, left (see leftoverRemover).
func (s *PartialsDir) removeLeftovers(partition string, outs []Output) (int, error) {
	paths := make([]string, len(outs))
	for i, o := range outs {
		paths[i] = s.path(partition, o)
	}
	n, err := atomicfile.RemoveTemps(paths...)
	if err != nil {
		err = fmt.Errorf("store partial: %w", err)
	}
	return n, err
}

// checkPartition refuses the partition names that would not round-trip
// through a partial's file name, in either store, so that a name one store
// takes the other does too.
func checkPartition(partition string) error {
	if strings.ContainsAny(partition, `/\.`) || partition == "" {
		return fmt.Errorf("store partial: partition %q: want a name without '/', '\\' or '.'", partition)
	}
	return nil
}

// Flush does nothing: every Write is durable when it returns.
func (s *PartialsDir) Flush(context.Context) error { return nil }

// ErrNoPartials is HasWindow's error for a directory that is missing or
// holds no partials of any window length.
var ErrNoPartials = errors.New("no partials")

// HasWindow checks that the directory holds partials of windows of size,
// naming the directory, size and the lengths it does hold when not: a
// reader given another --window, or the wrong directory, would otherwise
// find no window and say nothing, as if there had been no traffic. A
// directory that is missing or holds no partials at all is ErrNoPartials.
func (s *PartialsDir) HasWindow(_ context.Context, size time.Duration) error {
	ents, err := os.ReadDir(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("partials directory %s does not exist (want partials of %v windows): %w", s.Dir, size, ErrNoPartials)
	}
	if err != nil {
		return fmt.Errorf("partials directory %s: %w", s.Dir, err)
	}
	var sizes []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if d, err := time.ParseDuration(e.Name()); err == nil {
			if d == size {
				return nil
			}
			sizes = append(sizes, e.Name())
		}
	}
	return noWindow("partials directory "+s.Dir, size, sizes)
}

// noWindow is HasWindow's error for a store (named by store) without
// partials of windows of size, holding those of sizes: ErrNoPartials
// when it holds none.
func noWindow(store string, size time.Duration, sizes []string) error {
	if len(sizes) == 0 {
		return fmt.Errorf("%s holds no partials (want partials of %v windows): %w", store, size, ErrNoPartials)
	}
	return fmt.Errorf("%s holds no partials of %v windows; it holds %s: give --window", store, size, strings.Join(sizes, ", "))
}

// ReadProblem is a partial file that could not be read; the rest were.
type ReadProblem struct {
	Path string
	Err  error
}

// Read merges the partials of windows of length size that start in
// [from, to), by window start; files that cannot be read are skipped and
// reported (see MergePartials).
func (s *PartialsDir) Read(ctx context.Context, size time.Duration, from, to time.Time) (map[time.Time]*Partial, []ReadProblem, error) {
	return MergePartials(ctx, s, size, from, to)
}

// PartialsWalker is a store of partials that can be walked: PartialsDir
// or PartialsTable.
type PartialsWalker interface {
	Walk(ctx context.Context, size time.Duration, from, to time.Time, fn func(PartialFile, *Partial)) ([]ReadProblem, error)
}

// MergePartials merges the partials w holds of windows of length size that
// start in [from, to), by window start; partials that cannot be read are
// skipped and reported. A window's partials of one partition (the window
// and its corrections) merge as overlapping, in w's order; the merged
// partitions then merge as disjoint, in partition order, since the edge
// partitions Kinesis records by identity. The same partials give the same
// result whichever store holds them.
func MergePartials(ctx context.Context, w PartialsWalker, size time.Duration, from, to time.Time) (map[time.Time]*Partial, []ReadProblem, error) {
	type cell struct {
		start     time.Time
		partition string
	}
	cells := map[cell]*Partial{}
	var merges []ReadProblem
	problems, err := w.Walk(ctx, size, from, to, func(f PartialFile, p *Partial) {
		c := cell{f.Start, f.Partition}
		if acc := cells[c]; acc == nil {
			cells[c] = p
		} else if err := acc.Merge(p, false); err != nil {
			merges = append(merges, ReadProblem{f.Path, err})
		}
	})
	problems = append(problems, merges...)
	if err != nil {
		return nil, problems, err
	}
	keys := make([]cell, 0, len(cells))
	for c := range cells {
		keys = append(keys, c)
	}
	slices.SortFunc(keys, func(a, b cell) int { return cmp.Or(a.start.Compare(b.start), cmp.Compare(a.partition, b.partition)) })
	out := map[time.Time]*Partial{}
	for _, c := range keys {
		if acc := out[c.start]; acc == nil {
			out[c.start] = cells[c]
		} else if err := acc.Merge(cells[c], true); err != nil {
			problems = append(problems, ReadProblem{c.partition, err})
		}
	}
	return out, problems, nil
}

// PartialFile names one stored output: the file (or item), its window start,
// partition and sequence range (Output.RangeKey). Start, Partition and
// Range together identify the output, as Write's file names do.
type PartialFile struct {
	Path      string
	Start     time.Time
	Partition string
	Range     string
}

// Walk calls fn with every stored partial of windows of length size that
// start in [from, to), in file name order (by day, then window start);
// files that cannot be read are skipped and reported. The reads are local:
// ctx is not consulted.
func (s *PartialsDir) Walk(_ context.Context, size time.Duration, from, to time.Time, fn func(PartialFile, *Partial)) ([]ReadProblem, error) {
	root := filepath.Join(s.Dir, size.String())
	days, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read partials: %w", err)
	}
	var problems []ReadProblem
	for _, day := range days {
		d, err := time.Parse(time.DateOnly, day.Name())
		if err != nil || !day.IsDir() || !d.Add(24*time.Hour).After(from) || !d.Before(to) {
			continue
		}
		files, err := os.ReadDir(filepath.Join(root, day.Name()))
		if err != nil {
			return problems, fmt.Errorf("read partials: %w", err)
		}
		names := make([]string, 0, len(files))
		for _, f := range files {
			if strings.HasSuffix(f.Name(), partialsExt) {
				names = append(names, f.Name())
			}
		}
		slices.Sort(names)
		for _, name := range names {
			parts := strings.Split(strings.TrimSuffix(name, partialsExt), ".")
			path := filepath.Join(root, day.Name(), name)
			var ns int64
			if len(parts) == 3 {
				ns, err = strconv.ParseInt(parts[0], 10, 64)
			}
			if len(parts) != 3 || err != nil {
				problems = append(problems, ReadProblem{path, fmt.Errorf("not a partial's name")})
				continue
			}
			start := time.Unix(0, ns).UTC()
			if start.Before(from) || !start.Before(to) {
				continue
			}
			b, err := os.ReadFile(path)
			if err != nil {
				problems = append(problems, ReadProblem{path, err})
				continue
			}
			p, err := DecodePartial(b)
			if err == nil && (!p.Start.Equal(start) || p.Size != size) {
				err = fmt.Errorf("holds the window %v+%v", p.Start, p.Size)
			}
			if err != nil {
				problems = append(problems, ReadProblem{path, err})
				continue
			}
			fn(PartialFile{Path: path, Start: start, Partition: parts[1], Range: parts[2]}, p)
		}
	}
	return problems, nil
}
