package main

import (
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/aggregator"
)

// Kinesis sequence numbers as kinesalite and Kinesis write them: 56
// digits, far beyond uint64.
const (
	seqA = "49590338271490256608559692538361571095921575989136588898"
	seqB = "49590338271490256608559692540779422735150834338549071874"
)

// parseRange reads every form of rw_range the aggregator writes as a
// range: the aggregate command's event or offset range, and those earlier
// Lambda versions wrote, a commit group's first and last sequence numbers
// and a part's seq_sub ends; the end it returns holds exactly the
// positions up to it.
func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		name     string
		rng      string
		from, to position
		held     []position
		notHeld  []position
	}{{
		name: "aggregate offsets", rng: aggregator.Output{From: 12, To: 40}.RangeKey(),
		from: position{"12", -1}, to: position{"40", -1},
		held: []position{offset(0), offset(40)}, notHeld: []position{offset(41), offset(400)},
	}, {
		name: "aggregate, one event at offset 0", rng: aggregator.Output{From: 0, To: 0}.RangeKey(),
		from: position{"0", -1}, to: position{"0", -1},
		held: []position{offset(0)}, notHeld: []position{offset(1)},
	}, {
		name: "aggregate, past uint32", rng: aggregator.Output{From: 1 << 40, To: 1<<64 - 1}.RangeKey(),
		from: position{"1099511627776", -1}, to: position{"18446744073709551615", -1},
		held: []position{offset(1<<64 - 1)},
	}, {
		name: "lambda commit group", rng: seqA + "-" + seqB,
		from: position{seqA, -1}, to: position{seqB, -1},
		// Every event of the last record is in the group.
		held:    []position{{seqA, 0}, {seqB, 0}, {seqB, 7}, offset(1 << 63)},
		notHeld: []position{{seqB[:55] + "5", 0}, {"1" + seqA, 0}},
	}, {
		name: "lambda part", rng: seqA + "_3-" + seqB + "_5",
		from: position{seqA, 3}, to: position{seqB, 5},
		held:    []position{{seqB, 0}, {seqB, 5}, {seqA, 900}},
		notHeld: []position{{seqB, 6}, {seqB[:55] + "5", 0}},
	}, {
		name: "lambda part within one record", rng: seqA + "_0-" + seqA + "_0",
		from: position{seqA, 0}, to: position{seqA, 0},
		held: []position{{seqA, 0}}, notHeld: []position{{seqA, 1}},
	}, {
		name: "leading zeros compare by value", rng: "007-0100",
		from: position{"7", -1}, to: position{"100", -1},
		held: []position{offset(99), offset(100)}, notHeld: []position{offset(101)},
	}} {
		from, to, err := parseRange(c.rng)
		if err != nil || from != c.from || to != c.to {
			t.Errorf("%s: parseRange(%q) = %v, %v, %v; want %v, %v", c.name, c.rng, from, to, err, c.from, c.to)
		}
		for _, p := range c.held {
			if !to.holds(p) {
				t.Errorf("%s: %v does not hold %v", c.name, to, p)
			}
		}
		for _, p := range c.notHeld {
			if to.holds(p) {
				t.Errorf("%s: %v holds %v", c.name, to, p)
			}
		}
	}
}

// A range of no form the aggregator writes is an error that names it,
// never a misread position.
func TestParseRangeRefuses(t *testing.T) {
	for _, rng := range []string{
		"", "12", "12-", "-40", "12-40-50", "40-12", " 12-40", "+12-40", "12-0x40", "1e3-2e3",
		seqB + "-" + seqA,
		strings.Repeat("9", 129) + "-" + strings.Repeat("9", 129),
		seqA + "_3-" + seqB, // one end with an event index, the other without
		seqA + "-" + seqB + "_5",
		seqA + "_-" + seqB + "_5",
		seqA + "_5-" + seqA + "_3",
		seqA + "_3_4-" + seqB + "_5",
		seqA + "_3-" + seqB + "_99999999999999999999",
		seqA + "_-3-" + seqB + "_5",
		"shardId-000000000000",
		seqA + "_3", // the Lambda's key: where a window's events begin, no end
	} {
		if _, _, err := parseRange(rng); err == nil || !strings.Contains(err.Error(), rng) {
			t.Errorf("parseRange(%q) = %v, want an error naming it", rng, err)
		}
	}
}
