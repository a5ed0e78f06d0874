// Package examples holds the shipped configuration files; the seed
// configuration is also the binary's built-in default.
package examples

import _ "embed"

// Seed is examples/seed.yaml: the seed design's limits table.
//
//go:embed seed.yaml
var Seed []byte
