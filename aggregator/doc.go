// Package aggregator is reserved for the decision pipeline described in ARCHITECTURE.md;
// it has no code yet.
package aggregator
