// Command benchaggregate is the Go half of tests/bench-aggregate: it writes
// N events of the generator as the decision log writes them at high rates
// (records of decisions.batch's default, 3,072 events, compressed as
// decisionlog.Compression chooses: zstd per buffer) and as one Parquet
// file for DuckDB, then times the aggregator's columnar path over the
// records on one core (and over the records the log wrote before: 1,024
// events in a zstd frame with the dictionary), and prints its figures and
// its answers (counts by tier, rule and outcome; distinct clients) for the
// script to compare with DuckDB's.
//
// The like-for-like leg is "the query's columns": it decodes only the
// columns the SQL reads (aggregator.SummaryColumns: kind, tier, rule,
// outcome, user id and the client address) and computes what the SQL
// does, counts by tier, rule and outcome and one distinct count of
// clients (aggregator.Summary). The other legs are kept beside it: the
// aggregator's counts and its four families of distinct-client sketches
// over every column it reads (what a window of the rollup costs of
// them), decoding alone, and the full rollup.
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
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/internal/rusage"
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
	answer := flag.String("answer", "", "write the aggregator's counts to this `file`, one line per (tier, rule, outcome)")
	answerQuery := flag.String("answer-query", "", "write the query leg's counts (aggregator.Summary) to this `file`, likewise")
	flag.Parse()
	if err := run(*n, *parquetPath, *runs, *answer, *answerQuery); err != nil {
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
func cpuSeconds() float64 { return rusage.CPU().Seconds() }

func run(n int, parquetPath string, runs int, answerPath, queryPath string) error {
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
	// emit times runs of f over the records (those before, for a what
	// ending in beforeSuffix), decoding the columns of set; start is
	// called before each run, so that every run starts from empty
	// aggregates, as every query of DuckDB's does.
	emit := func(what string, set columnar.ColumnSet, start func(), f func(*columnar.Columns) error) error {
		records := records
		if strings.HasSuffix(what, beforeSuffix) {
			records = before
		}
		for range runs {
			start()
			runtime.GC()
			begin, cpu := time.Now(), cpuSeconds()
			for _, rec := range records {
				if err := dec.DecodeColumnSet(rec, set, f); err != nil {
					return err
				}
			}
			s := time.Since(begin).Seconds()
			b, _ := json.Marshal(result{What: what, Seconds: s, CPU: cpuSeconds() - cpu, Rate: float64(n) / s})
			fmt.Println(string(b))
		}
		return nil
	}
	var (
		b aggregator.Batch
		// What the SQL computes, and only that: counts by tier, rule and
		// outcome and one distinct count, from the columns the SQL reads.
		summary    *aggregator.Summary
		newSummary = func() { summary = &aggregator.Summary{} }
		summaryOf  = func(c *columnar.Columns) error {
			b.Prepare(c)
			summary.UpdateColumns(&b, 0, b.Len())
			return nil
		}
		// The aggregator's counts (cells by tier, rule, outcome and reason;
		// by node; response errors) and its four families of distinct
		// clients (overall, refused, per tier, per rule), over every column
		// it reads: what a window of the rollup spends on them.
		counts    *aggregator.Partial
		newCounts = func() { counts = aggregator.NewPartial(time.Time{}, time.Hour, 1) }
		countsOf  = func(c *columnar.Columns) error {
			b.Prepare(c)
			counts.Counts.UpdateColumns(&b, 0, b.Len())
			counts.Clients.UpdateColumns(&b, 0, b.Len())
			return nil
		}
		nothing    = func() {}
		decodeOnly = func(c *columnar.Columns) error { b.Prepare(c); return nil }
	)
	for _, leg := range []struct {
		what  string
		set   columnar.ColumnSet
		start func()
		f     func(*columnar.Columns) error
	}{
		{"columnar: the query's columns, counts and distinct clients", aggregator.SummaryColumns, newSummary, summaryOf},
		{"columnar: the query's columns, decode only", aggregator.SummaryColumns, nothing, decodeOnly},
		{"columnar: decode, counts and distinct clients", columnar.AllColumns, newCounts, countsOf},
		{"columnar: decode only", columnar.AllColumns, nothing, decodeOnly},
		{"columnar: the query's columns, counts and distinct clients" + beforeSuffix, aggregator.SummaryColumns, newSummary, summaryOf},
		{"columnar: decode, counts and distinct clients" + beforeSuffix, columnar.AllColumns, newCounts, countsOf},
		{"columnar: decode only" + beforeSuffix, columnar.AllColumns, nothing, decodeOnly},
	} {
		if err := emit(leg.what, leg.set, leg.start, leg.f); err != nil {
			return err
		}
	}
	for range runs {
		full := aggregator.NewRollup(aggregator.Options{Window: time.Minute})
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
	// The answers, for the script to compare with DuckDB's: each leg's last
	// run counted every event.
	all, one := aggregator.Estimate(counts.Clients.All), aggregator.Estimate(summary.Clients)
	fmt.Printf("{\"what\":\"distinct clients (HyperLogLog)\",\"value\":%d,\"query\":%d}\n", all, one)
	if all != one {
		return fmt.Errorf("distinct clients: the query's leg estimates %d, the aggregator's %d", one, all)
	}
	byCell := map[aggregator.SummaryKey]uint64{}
	for k, v := range counts.Counts.Cells {
		byCell[aggregator.SummaryKey{Tier: k.Tier, Rule: k.Rule, Outcome: k.Outcome}] += v
	}
	return errors.Join(writeAnswer(answerPath, byCell), writeAnswer(queryPath, summary.Counts))
}

// writeAnswer writes counts to the file at path (none when path is ""),
// one line per (tier, rule, outcome) in sorted order, as the DuckDB half
// writes its answer.
func writeAnswer(path string, counts map[aggregator.SummaryKey]uint64) error {
	if path == "" {
		return nil
	}
	var lines []string
	for k, v := range counts {
		lines = append(lines, fmt.Sprintf("%s\t%s\t%s\t%d\n", k.Tier, k.Rule, k.Outcome.Name(), v))
	}
	slices.Sort(lines)
	return os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644)
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
