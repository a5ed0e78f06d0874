// Package dashboards shows what the aggregator counts, in two places: the
// CloudWatch dashboards and alarms of the AWS deployment (Dashboards,
// Alarms, CloudFormation, Apply), built from the metric names and
// dimensions of the aggregator's EMF documents (aggregator.Metric*,
// aggregator.Dim*), and the live web dashboard of the embedded one
// (Live), which reads the aggregator's partials, so that both show the
// same numbers.
package dashboards
