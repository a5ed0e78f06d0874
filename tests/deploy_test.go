package tests

import (
	"fmt"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/decisions/kinesis"
	"github.com/ratewarden/ratewarden/edge/dynamostore"
	"github.com/ratewarden/ratewarden/edge/lists"
)

// TestCloudFormationMatchesCode checks that deploy/cloudformation.yaml
// declares the tables the code creates with `aws init`: the same keys, the
// same attribute types, billing per request, and time to live on the
// attributes the code writes expiries to.
func TestCloudFormationMatchesCode(t *testing.T) {
	raw, err := os.ReadFile("../deploy/cloudformation.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type keyElem struct {
		AttributeName string `yaml:"AttributeName"`
		KeyType       string `yaml:"KeyType"`
	}
	type attrDef struct {
		AttributeName string `yaml:"AttributeName"`
		AttributeType string `yaml:"AttributeType"`
	}
	var tmpl struct {
		Resources map[string]struct {
			Type       string `yaml:"Type"`
			Properties struct {
				BillingMode             string    `yaml:"BillingMode"`
				AttributeDefinitions    []attrDef `yaml:"AttributeDefinitions"`
				KeySchema               []keyElem `yaml:"KeySchema"`
				TimeToLiveSpecification *struct {
					AttributeName string `yaml:"AttributeName"`
					Enabled       bool   `yaml:"Enabled"`
				} `yaml:"TimeToLiveSpecification"`
			} `yaml:"Properties"`
		} `yaml:"Resources"`
	}
	if err := yaml.Unmarshal(raw, &tmpl); err != nil {
		t.Fatal(err)
	}
	if tmpl.Resources["DecisionStream"].Type != "AWS::Kinesis::Stream" {
		t.Errorf("DecisionStream: type %q", tmpl.Resources["DecisionStream"].Type)
	}
	for _, c := range []struct {
		resource string
		spec     *dynamodb.CreateTableInput
		ttl      string
	}{
		{"CountersTable", dynamostore.TableSpec("x"), dynamostore.TTLAttribute},
		{"ListsTable", lists.TableSpec("x"), lists.TableExpiresAttribute},
		{"LeasesTable", kinesis.LeaseTableSpec("x"), ""},
		{"StateTable", aggregator.StateTableSpec("x"), ""},
	} {
		r, ok := tmpl.Resources[c.resource]
		if !ok || r.Type != "AWS::DynamoDB::Table" {
			t.Errorf("%s: missing or of type %q", c.resource, r.Type)
			continue
		}
		p := r.Properties
		var defs []attrDef
		for _, d := range c.spec.AttributeDefinitions {
			defs = append(defs, attrDef{aws.ToString(d.AttributeName), string(d.AttributeType)})
		}
		var keys []keyElem
		for _, k := range c.spec.KeySchema {
			keys = append(keys, keyElem{aws.ToString(k.AttributeName), string(k.KeyType)})
		}
		if fmt.Sprint(p.AttributeDefinitions) != fmt.Sprint(defs) || fmt.Sprint(p.KeySchema) != fmt.Sprint(keys) {
			t.Errorf("%s: attributes %v keys %v; the code creates %v and %v", c.resource, p.AttributeDefinitions, p.KeySchema, defs, keys)
		}
		if p.BillingMode != string(c.spec.BillingMode) {
			t.Errorf("%s: billing %q, the code %q", c.resource, p.BillingMode, c.spec.BillingMode)
		}
		switch {
		case c.ttl == "" && p.TimeToLiveSpecification != nil:
			t.Errorf("%s: time to live set, the code has none", c.resource)
		case c.ttl != "" && (p.TimeToLiveSpecification == nil || !p.TimeToLiveSpecification.Enabled || p.TimeToLiveSpecification.AttributeName != c.ttl):
			t.Errorf("%s: time to live %+v, want on %q", c.resource, p.TimeToLiveSpecification, c.ttl)
		}
	}
}
