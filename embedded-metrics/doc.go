// Package emf is reserved for the CloudWatch Embedded Metric Format library
// described in ARCHITECTURE.md; it has no code yet.
package emf
