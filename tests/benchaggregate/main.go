// Command benchaggregate is the Go half of tests/bench-aggregate: it writes
// N events of the generator as the decision log writes them at high rates
// (records of decisions.batch's default, 3,072 events, compressed as
// decisionlog.Compression chooses: zstd per buffer) and as one Parquet
// file for DuckDB, then times the aggregator's columnar path over the
// records on one core (and over the records the log wrote before: 1,024
// events in a zstd frame with the dictionary), and prints its figures and
// its answer (counts by tier, rule and outcome; distinct clients) for the
// script to compare with DuckDB's.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// batchSize is the events of one log record at high rates: the log's
// default batch (decisions.batch).
const batchSize = 3072

// beforeSize is the events of one log record before, and beforeSuffix
// names the measurements over those records (ZstdDict).
const (
	beforeSize   = 1024
	beforeSuffix = " (before: records of 1,024, ZstdDict)"
)

func main() {
	n := flag.Int("n", 10_000_000, "events")
	parquetPath := flag.String("parquet", "", "write the events to this Parquet `file`")
	runs := flag.Int("runs", 3, "timed runs of each measurement")
	answer := flag.String("answer", "", "write the columnar path's counts to this `file`, one line per (tier, rule, outcome)")
	flag.Parse()
	if err := run(*n, *parquetPath, *runs, *answer); err != nil {
		fmt.Fprintln(os.Stderr, "benchaggregate:", err)
		os.Exit(1)
	}
}

// result is one timed measurement, as one JSON line.
type result struct {
	What    string  `json:"what"`
	Seconds float64 `json:"seconds"`
	CPU     float64 `json:"cpu_seconds"` // the process's user and system time: what other work on the machine inflates least
	Rate    float64 `json:"events_per_s"`
}

// cpuSeconds returns the process's user and system time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func run(n int, parquetPath string, runs int, answerPath string) error {
	runtime.GOMAXPROCS(1)
	records, err := encodeRecords(n, batchSize)
	if err != nil {
		return err
	}
	if parquetPath != "" {
		if err := writeParquet(parquetPath, records); err != nil {
			return err
		}
	}
	before, err := encodeRecords(n, beforeSize)
	if err != nil {
		return err
	}
	dec := columnar.NewDecoder()
	emit := func(what string, f func(*columnar.Columns) error) error {
		records := records
		if strings.HasSuffix(what, beforeSuffix) {
			records = before
		}
		for range runs {
			runtime.GC()
			start, cpu := time.Now(), cpuSeconds()
			for _, rec := range records {
				if err := dec.DecodeColumns(rec, f); err != nil {
					return err
				}
			}
			s := time.Since(start).Seconds()
			b, _ := json.Marshal(result{What: what, Seconds: s, CPU: cpuSeconds() - cpu, Rate: float64(n) / s})
			fmt.Println(string(b))
		}
		return nil
	}
	var b aggregator.Batch
	// What the SQL computes: counts by tier, rule and outcome (the
	// aggregator's cells, which add the reason) and distinct clients.
	var query *aggregator.Partial
	err = emit("columnar: decode, counts and distinct clients", func(c *columnar.Columns) error {
		b.Prepare(c)
		if query == nil {
			query = aggregator.NewPartial(time.Time{}, time.Hour, 1)
		}
		query.Counts.UpdateColumns(&b, 0, b.Len())
		query.Clients.UpdateColumns(&b, 0, b.Len())
		return nil
	})
	if err != nil {
		return err
	}
	query = nil
	if err := emit("columnar: decode only", func(c *columnar.Columns) error { b.Prepare(c); return nil }); err != nil {
		return err
	}
	err = emit("columnar: decode, counts and distinct clients"+beforeSuffix, func(c *columnar.Columns) error {
		b.Prepare(c)
		if query == nil {
			query = aggregator.NewPartial(time.Time{}, time.Hour, 1)
		}
		query.Counts.UpdateColumns(&b, 0, b.Len())
		query.Clients.UpdateColumns(&b, 0, b.Len())
		return nil
	})
	if err != nil {
		return err
	}
	query = nil
	if err := emit("columnar: decode only"+beforeSuffix, func(c *columnar.Columns) error { b.Prepare(c); return nil }); err != nil {
		return err
	}
	var full *aggregator.Rollup
	for range runs {
		full = aggregator.NewRollup(aggregator.Options{Window: time.Minute})
		seq := uint64(0)
		start, cpu := time.Now(), cpuSeconds()
		for _, rec := range records {
			if err := dec.DecodeColumns(rec, func(c *columnar.Columns) error {
				full.AddBatch(c, seq)
				seq += uint64(c.Len)
				return nil
			}); err != nil {
				return err
			}
			full.Flush(false, func(aggregator.Output) error { return nil })
		}
		full.Flush(true, func(aggregator.Output) error { return nil })
		s := time.Since(start).Seconds()
		out, _ := json.Marshal(result{What: "columnar: decode and full rollup (1 min windows)", Seconds: s, CPU: cpuSeconds() - cpu, Rate: float64(n) / s})
		fmt.Println(string(out))
	}
	// The answer, for the script to compare with DuckDB's.
	p := aggregator.NewPartial(time.Time{}, time.Hour, 1)
	for _, rec := range records {
		dec.DecodeColumns(rec, func(c *columnar.Columns) error {
			b.Prepare(c)
			p.Counts.UpdateColumns(&b, 0, b.Len())
			p.Clients.UpdateColumns(&b, 0, b.Len())
			return nil
		})
	}
	type group struct {
		tier, rule, outcome string
	}
	sums := map[group]uint64{}
	for k, v := range p.Counts.Cells {
		sums[group{k.Tier, k.Rule, k.Outcome.Name()}] += v
	}
	var lines []string
	for k, v := range sums {
		lines = append(lines, fmt.Sprintf("%s\t%s\t%s\t%d", k.tier, k.rule, k.outcome, v))
	}
	slices.Sort(lines)
	fmt.Printf("{\"what\":\"distinct clients (HyperLogLog)\",\"value\":%d}\n", aggregator.Estimate(p.Clients.All))
	if answerPath != "" {
		f, err := os.Create(answerPath)
		if err != nil {
			return err
		}
		for _, l := range lines {
			fmt.Fprintln(f, l)
		}
		return f.Close()
	}
	return nil
}

// encodeRecords encodes the generator's first n events (the same for
// every call) in records of size events as the decision log's writer
// does (decisionlog.Compression), and reports their size.
func encodeRecords(n, size int) ([][]byte, error) {
	g := decisiontest.NewGenerator(1, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	compression := decisionlog.Compression(size)
	enc := columnar.NewEncoder(columnar.Options{Compression: compression})
	var records [][]byte
	buf := make([]decisions.Decision, size)
	bytes := 0
	for done := 0; done < n; done += size {
		m := min(size, n-done)
		for i := range m {
			buf[i] = g.Next()
		}
		rec, err := enc.Encode(nil, buf[:m])
		if err != nil {
			return nil, err
		}
		records = append(records, rec)
		bytes += len(rec)
	}
	fmt.Fprintf(os.Stderr, "benchaggregate: %d events in %d records of %d (%v), %.1f MB (%.1f B/event)\n",
		n, len(records), size, compression, float64(bytes)/1e6, float64(bytes)/float64(n))
	return records, nil
}

// writeParquet writes the records' events to one Parquet file, as
// `ratewarden decisions export` does.
func writeParquet(path string, records [][]byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	dec := columnar.NewDecoder()
	var decodeErr error
	batches := iter.Seq[[]decisions.Decision](func(yield func([]decisions.Decision) bool) {
		var ds []decisions.Decision
		for _, rec := range records {
			if ds, decodeErr = dec.Decode(rec, ds[:0]); decodeErr != nil || !yield(ds) {
				return
			}
		}
	})
	// The Parquet writer closes what it is given if it can; the file is
	// ours to close.
	werr := columnar.WriteParquet(struct{ io.Writer }{f}, batches)
	return errors.Join(werr, decodeErr, f.Close())
}
