package decisions

import _ "embed"

// JSONSchema is the JSON Schema (draft 2020-12) of a decision event as a
// JSON line, for emitters and validators outside this module.
//
//go:embed decision.schema.json
var JSONSchema []byte
