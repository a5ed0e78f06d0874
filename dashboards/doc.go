// Package dashboards is reserved for the decision pipeline described in ARCHITECTURE.md;
// it has no code yet.
package dashboards
