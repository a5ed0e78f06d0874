// Package report turns the aggregator's merged partials into the abuse
// report — a summary, the top offenders by address, user and path, the
// feedback actions and alerts of the range, trends as charts and a section
// per tier — and renders it, or a what-if comparison (WhatIf), as Markdown,
// HTML (one file, charts as inline SVG, no external assets, no scripts),
// JSON or CSV.
//
// A report reads Windows: the partials of a time range merged per window,
// from a store of partials (ReadPartials: an aggregator.PartialsDir or
// PartialsTable; ReadDir for a directory) or rolled up from the decision log on the
// fly with the aggregator's own Rollup (RollLog), plus optional alert and
// action records (ReadAlerts). Build is a pure function of those inputs and
// its Options, so the same input renders to the same bytes.
//
// Coverage: the range is aligned to whole windows. A window with no partial
// is either idle (no decision was made in it) or was not aggregated (the
// aggregator was down or behind, or its file was lost); the partials cannot
// tell which. The report therefore lists every such window, merged into
// gaps, and every partial file it could not read, with its error; and it
// marks its totals partial whenever there is either, since then they may
// undercount. It never fills a gap or estimates what is missing.
package report
