// Package emf writes CloudWatch Embedded Metric Format documents: JSON log
// lines from which CloudWatch extracts metrics. It builds documents within
// the specification's limits, splits what would exceed them, validates any
// document against the specification, and delivers documents through sinks
// that say what they could not send.
package emf
