package accuracy

import (
	"strconv"
	"time"
)

// tableHeader is the Markdown table's header and alignment rows.
const tableHeader = "| trace | algorithm | store | mode | skew | requests | wrongly allowed % | wrongly refused % | writes/request | scraper writes/request | wrong % steady / bursty / scraper | max over limit, aligned window | max over limit, any window |\n" +
	"| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"

// AppendMarkdown appends a Markdown table of the results, one row each in
// the order given, to dst. It holds only what a replay determines, never
// its wall time, so the same replays give the same table.
func AppendMarkdown(dst []byte, results []*Result) []byte {
	dst = append(dst, tableHeader...)
	for _, r := range results {
		dst = append(dst, "| "...)
		dst = append(dst, r.Trace...)
		dst = append(dst, " | "...)
		dst = append(dst, r.Algorithm.String()...)
		dst = append(dst, " | "...)
		dst = append(dst, r.Store...)
		dst = append(dst, " | "...)
		dst = append(dst, r.Mode.String()...)
		if r.Mode == Batched {
			dst = append(dst, " (e = "...)
			dst = strconv.AppendFloat(dst, r.MaxError, 'g', -1, 64)
			dst = append(dst, ')')
		}
		dst = append(dst, " | ±"...)
		dst = appendDuration(dst, r.Skew)
		dst = append(dst, " | "...)
		dst = strconv.AppendInt(dst, int64(r.Requests), 10)
		dst = append(dst, " | "...)
		dst = strconv.AppendFloat(dst, r.Pct(r.WronglyAllowed), 'f', 4, 64)
		dst = append(dst, " | "...)
		dst = strconv.AppendFloat(dst, r.Pct(r.WronglyRefused), 'f', 4, 64)
		dst = append(dst, " | "...)
		dst = strconv.AppendFloat(dst, r.WritesPerRequest(), 'f', 4, 64)
		dst = append(dst, " | "...)
		dst = strconv.AppendFloat(dst, r.ScraperWritesPerRequest(), 'f', 4, 64)
		for c := range r.ByClass {
			sep := " / "
			if c == 0 {
				sep = " | "
			}
			dst = append(dst, sep...)
			dst = strconv.AppendFloat(dst, r.ByClass[c].WrongPct(), 'f', 4, 64)
		}
		dst = append(dst, " | "...)
		dst = appendOver(dst, r.MaxOverAligned, r.Limit)
		dst = append(dst, " | "...)
		dst = appendOver(dst, r.MaxOverSliding, r.Limit)
		dst = append(dst, " |\n"...)
	}
	return dst
}

// appendOver appends an over-admission as hits and as a share of the limit.
func appendOver(dst []byte, over, limit int64) []byte {
	dst = strconv.AppendInt(dst, over, 10)
	dst = append(dst, " ("...)
	dst = strconv.AppendFloat(dst, 100*float64(over)/float64(limit), 'f', 1, 64)
	return append(dst, " %)"...)
}

// appendDuration appends d in milliseconds, the unit clock skew is spoken of in.
func appendDuration(dst []byte, d time.Duration) []byte {
	dst = strconv.AppendInt(dst, d.Milliseconds(), 10)
	return append(dst, " ms"...)
}
