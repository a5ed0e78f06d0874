package decisions

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// TestJSONSchemaMatchesEncoder holds the schema file and the encoder to
// each other: every field the encoder writes is in the schema with the
// right JSON type, every schema property is written for some kind, and the
// required fields are always written.
func TestJSONSchemaMatchesEncoder(t *testing.T) {
	var schema struct {
		Required   []string `json:"required"`
		Properties map[string]struct {
			Type string   `json:"type"`
			Enum []string `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(JSONSchema, &schema); err != nil {
		t.Fatalf("schema: %v", err)
	}
	d := sample()
	events := []Decision{d,
		{Kind: KindFeedback, Time: d.Time, Node: "a", List: "deny", Action: "add", Target: "203.0.113.0/24", TTL: time.Hour},
		{Kind: KindDrops, Time: d.Time, Node: "a", Dropped: 7},
	}
	seen := map[string]bool{}
	for _, ev := range events {
		var obj map[string]any
		if err := json.Unmarshal(AppendJSON(nil, &ev), &obj); err != nil {
			t.Fatal(err)
		}
		for _, r := range schema.Required {
			if _, ok := obj[r]; !ok {
				t.Errorf("%s event lacks required %q", ev.Kind, r)
			}
		}
		for k, v := range obj {
			seen[k] = true
			p, ok := schema.Properties[k]
			if !ok {
				t.Errorf("encoder writes %q, which the schema lacks", k)
				continue
			}
			switch v := v.(type) {
			case string:
				if p.Type != "string" && (p.Enum == nil || !slices.Contains(p.Enum, v)) {
					t.Errorf("%s: %q is not allowed by the schema (%+v)", k, v, p)
				}
			case float64:
				if p.Type != "number" && (p.Type != "integer" || v != float64(int64(v))) {
					t.Errorf("%s: number %v, schema says %+v", k, v, p)
				}
			default:
				t.Errorf("%s: unexpected JSON type %T", k, v)
			}
		}
	}
	for k := range schema.Properties {
		if !seen[k] {
			t.Errorf("schema property %q is never written", k)
		}
	}
}
