package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/dashboards"
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

// TestCloudWatchTemplateIsGenerated: deploy/cloudwatch.json is what
// `ratewarden dashboards --out` writes as cloudformation.json for the
// default namespace, so the template's dashboards and alarms are the
// checked ones; its dashboards read the stack's region.
func TestCloudWatchTemplateIsGenerated(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	if out, err := exec.Command(bin, "dashboards", "--out", dir).CombinedOutput(); err != nil {
		t.Fatalf("dashboards: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "cloudformation.json"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../deploy/cloudwatch.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("deploy/cloudwatch.json differs from `ratewarden dashboards --out DIR`'s cloudformation.json: regenerate it with\n  go run ./cmd/ratewarden dashboards --out /tmp/cw && cp /tmp/cw/cloudformation.json deploy/cloudwatch.json")
	}
	var tmpl struct {
		Resources map[string]struct {
			Type       string
			Properties json.RawMessage
		}
	}
	if err := json.Unmarshal(want, &tmpl); err != nil {
		t.Fatal(err)
	}
	cat := emittedCatalogue(t)
	kinds := map[string]int{}
	for id, r := range tmpl.Resources {
		kinds[r.Type]++
		switch r.Type {
		case "AWS::CloudWatch::Dashboard":
			var p struct {
				DashboardName string
				DashboardBody struct {
					Sub string `json:"Fn::Sub"`
				}
			}
			if err := json.Unmarshal(r.Properties, &p); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if !strings.Contains(p.DashboardBody.Sub, `"region":"${AWS::Region}"`) {
				t.Errorf("%s: the body does not read the stack's region", id)
			}
			body := strings.ReplaceAll(p.DashboardBody.Sub, "${AWS::Region}", "eu-west-1")
			if strings.Contains(body, "${") {
				t.Errorf("%s: the body holds another substitution", id)
			}
			refs, _ := dashboardRefs(t, id, []byte(body))
			for _, msg := range checkRefs(cat, id, refs) {
				t.Error(msg)
			}
		case "AWS::CloudWatch::Alarm":
			var a dashboards.Alarm
			dec := json.NewDecoder(bytes.NewReader(r.Properties))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&a); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			for _, msg := range checkRefs(cat, id, alarmRefs(a)) {
				t.Error(msg)
			}
		default:
			t.Errorf("%s: unexpected type %s", id, r.Type)
		}
	}
	if kinds["AWS::CloudWatch::Dashboard"] != 3 || kinds["AWS::CloudWatch::Alarm"] != 3 {
		t.Errorf("resources %v, want 3 dashboards and 3 alarms", kinds)
	}
}
