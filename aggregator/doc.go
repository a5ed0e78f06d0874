// Package aggregator rolls decision events up into per-window partial
// aggregates: counts by tier, rule, outcome and reason, distinct clients,
// store latency and the top offenders. Every aggregate merges — two halves
// merged equal the whole — so shards and windows roll up independently, and
// a reader merges the partials of any time range.
//
// A Rollup keeps the open windows of one source partition (a log, a Kinesis
// shard) in event time: a window closes when the partition's watermark (the
// latest event time seen, less the allowed lateness) passes its end, not on
// the wall clock, so replaying the same events gives the same windows. Late
// events are counted and either merged into a correction of their window or
// dropped, by configuration. An event more than Options.MaxSkew ahead of the
// latest event time joins its window but does not move the watermark until
// a quorum of such events came in a row (a quiet period ended, or the
// partition's first events): one event stamped in the future cannot close
// the windows of the present. The rule reads no clock, so a replay moves the
// watermark at the same events. A partition holds at most Options.MaxAhead
// windows ahead of its latest event time and Options.MaxCorrections pending
// corrections; an event that would open one more is dropped and counted, so
// records stamped at distinct windows cannot exhaust memory. A window keeps Options.MaxKeys distinct
// tiers, rules, nodes and reasons apart, each, and counts the rest under
// OtherKey, so that names chosen by whoever writes the stream bound what a
// window holds.
//
// Run rolls up what a Source (the small interface the aggregator needs of
// any source of decisions: Run(ctx, stream.Handler)) hands over, one
// partition at a time, through the aggregator's one stream.Handler;
// RunKinesis is Run over a kinesis.Source, one partition per shard,
// sharing the shards with other processes through leases. RunLog rolls the
// local decision log up as one partition. They save each partition's State
// (in a StateStore: a directory, or a DynamoDB table) with the outputs
// before delivering them, so a crash or a change of hands neither loses an
// output nor counts an event twice.
//
// Outputs go to Sinks. The partials are stored in a PartialsDir (a file
// per output) or a PartialsTable (a DynamoDB item per output, keyed the
// same way); MergePartials reads either back, merged per window, for the
// reports, the alerts and the dashboard.
//
// Each aggregate lives in its own file with the same three operations:
// update from one decision, merge another of its kind, and a deterministic
// binary encoding (append to a buffer, decode back). A record batch's
// columns (columnar.Decoder.DecodeColumns) roll up without a Decision per
// event through Batch, Partial.UpdateColumns and Rollup.AddBatch, to the
// same bytes as the events one by one. A reader that wants only counts by
// tier, rule and outcome and distinct clients uses a Summary, which reads
// SummaryColumns alone (columnar.Decoder.DecodeColumnSet).
package aggregator
