package demo

import _ "embed"

// Config is demo.yaml: the seed's limits, with the demo's traffic
// generator trusted to say who its clients are, and a limit on logins.
//
//go:embed demo.yaml
var Config []byte
