package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/report"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/dashboards"
	"github.com/ratewarden/ratewarden/decisions/kinesis"
	"github.com/ratewarden/ratewarden/edge/dynamostore"
	"github.com/ratewarden/ratewarden/edge/lambdaedge"
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
		{"PartialsTable", aggregator.PartialsTableSpec("x"), ""},
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

// cfnTemplate is the part of a CloudFormation template the Lambda@Edge
// checks read: resources with their properties as decoded YAML.
type cfnTemplate struct {
	Resources map[string]struct {
		Type       string         `yaml:"Type"`
		Condition  string         `yaml:"Condition"`
		Properties map[string]any `yaml:"Properties"`
	} `yaml:"Resources"`
}

func readTemplate(t *testing.T, path string) cfnTemplate {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tmpl cfnTemplate
	if err := yaml.Unmarshal(raw, &tmpl); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tmpl
}

// TestLambdaEdgeTemplates checks deploy/lambda-edge.yaml and
// deploy/lambda-edge-logs.yaml against what the viewer-request function
// needs and Lambda@Edge allows: a Node.js 20 function whose handler is the
// built package's entry point, no environment variables, the viewer-request
// limits, a role that Lambda and Lambda@Edge may assume and that may count
// in the counters table and read the secrets the configuration names, a
// numbered version associated with the viewer-request event, and a
// subscription filter that sends decision lines, and only those, to the
// stream.
func TestLambdaEdgeTemplates(t *testing.T) {
	tmpl := readTemplate(t, "../deploy/lambda-edge.yaml")
	res := func(name, typ string) map[string]any {
		r, ok := tmpl.Resources[name]
		if !ok || r.Type != typ {
			t.Fatalf("%s: missing or of type %q, want %s", name, r.Type, typ)
		}
		return r.Properties
	}
	fn := res("EdgeFunction", "AWS::Lambda::Function")
	cfg := loadConfigFile(t, "../examples/seed.yaml")
	files, err := lambdaedge.Files(mustCompile(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if fn["Runtime"] != "nodejs20.x" || fn["Handler"] != "index.handler" || files["index.mjs"] == nil ||
		!bytes.Contains(files["index.mjs"], []byte("export const handler")) {
		t.Errorf("function runtime %v handler %v; the package's entry is index.mjs exporting handler", fn["Runtime"], fn["Handler"])
	}
	if _, ok := fn["Environment"]; ok {
		t.Error("the function has Environment: Lambda@Edge allows no environment variables")
	}
	if fn["MemorySize"] != 128 || fn["Timeout"] != 5 {
		t.Errorf("memory %v timeout %v: a viewer-request function has at most 128 MB and 5 s", fn["MemorySize"], fn["Timeout"])
	}
	role := res("EdgeRole", "AWS::IAM::Role")
	principals := fmt.Sprint(role["AssumeRolePolicyDocument"])
	for _, p := range []string{"lambda.amazonaws.com", "edgelambda.amazonaws.com"} {
		if !strings.Contains(principals, p) {
			t.Errorf("the role's trust policy lacks %s: %s", p, principals)
		}
	}
	policy := fmt.Sprint(role["Policies"])
	for _, want := range []string{"dynamodb:UpdateItem", "table/${CountersTableName}", "ssm:GetParameters", "parameter${ChallengeKeysParameter}",
		"parameter${JWTKeyParameter}", "secretsmanager:GetSecretValue", "logs:PutLogEvents", "/aws/lambda/us-east-1.${FunctionName}"} {
		if !strings.Contains(policy, want) {
			t.Errorf("the role's policy lacks %s", want)
		}
	}
	ver := res("EdgeFunctionVersion", "AWS::Lambda::Version")
	if fmt.Sprint(ver["FunctionName"]) != "map[Ref:EdgeFunction]" {
		t.Errorf("version of %v", ver["FunctionName"])
	}
	dist := fmt.Sprint(res("Distribution", "AWS::CloudFront::Distribution")["DistributionConfig"])
	if !strings.Contains(dist, "EventType:viewer-request") || !strings.Contains(dist, "LambdaFunctionARN:map[Ref:EdgeFunctionVersion]") {
		t.Errorf("the distribution does not run the version on the viewer request: %s", dist)
	}
	// The template's defaults are the configuration's.
	raw, _ := os.ReadFile("../deploy/lambda-edge.yaml")
	for _, want := range []string{cfg.LambdaEdge.ChallengeKeysParameter, cfg.LambdaEdge.JWTKeyParameter, cfg.Store.DynamoDB.Table, cfg.LambdaEdge.SecretsSource} {
		if !strings.Contains(string(raw), "Default: "+want) {
			t.Errorf("deploy/lambda-edge.yaml has no parameter defaulting to %s, the configuration's default", want)
		}
	}

	logs := readTemplate(t, "../deploy/lambda-edge-logs.yaml")
	lg := logs.Resources["EdgeLogGroup"]
	sub := logs.Resources["DecisionsSubscription"]
	if lg.Type != "AWS::Logs::LogGroup" || fmt.Sprint(lg.Properties["LogGroupName"]) != "map[Fn::Sub:/aws/lambda/us-east-1.${FunctionName}]" {
		t.Errorf("log group %v %v: Lambda@Edge logs to /aws/lambda/us-east-1.<function> in each region", lg.Type, lg.Properties["LogGroupName"])
	}
	if sub.Type != "AWS::Logs::SubscriptionFilter" || fmt.Sprint(sub.Properties["DestinationArn"]) != "map[Ref:StreamArn]" ||
		fmt.Sprint(sub.Properties["RoleArn"]) != "map[Fn::GetAtt:[SubscriptionRole Arn]]" {
		t.Errorf("subscription %v %v", sub.Type, sub.Properties)
	}
	if p := fmt.Sprint(logs.Resources["SubscriptionRole"].Properties); !strings.Contains(p, "logs.amazonaws.com") || !strings.Contains(p, "kinesis:PutRecord") {
		t.Errorf("subscription role %s", p)
	}
	pattern, _ := sub.Properties["FilterPattern"].(string)
	vf := loadVectors(t)
	for _, line := range []string{vf.Vectors[0].Want.Decision, vf.Vectors[len(vf.Vectors)-1].Want.Decision} {
		if !termsMatch(pattern, line) {
			t.Errorf("filter %s does not match the decision line %s", pattern, line)
		}
	}
	for _, line := range []string{"START RequestId: 4b0f6c1e Version: 3", "REPORT RequestId: 4b0f6c1e\tDuration: 2.1 ms", "ratewarden: read secrets: timeout"} {
		if termsMatch(pattern, line) {
			t.Errorf("filter %s matches %q, which is no decision", pattern, line)
		}
	}
}

// termsMatch applies a CloudWatch Logs filter pattern of quoted terms: a
// line matches when it holds every term.
func termsMatch(pattern, line string) bool {
	terms := strings.Fields(pattern)
	if len(terms) == 0 {
		return true
	}
	for _, term := range terms {
		if !strings.Contains(line, strings.Trim(term, `"`)) {
			return false
		}
	}
	return true
}

func loadConfigFile(t *testing.T, path string) *config.Config {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func mustCompile(t *testing.T, cfg *config.Config) *lambdaedge.Config {
	t.Helper()
	c, err := lambdaedge.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
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

// TestReportScheduleTemplate checks deploy/report-schedule.yaml: an
// EventBridge rule on the schedule parameter that targets the report
// function with no input of its own (the function reads its range from the
// scheduled event, and refuses any other), a permission for EventBridge to
// invoke that function from this rule only, and a default schedule whose
// period is the range the report function covers by default, so that two
// consecutive scheduled reports abut: run through the function's own
// handler, the second starts where the first ends.
func TestReportScheduleTemplate(t *testing.T) {
	raw, err := os.ReadFile("../deploy/report-schedule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tmpl struct {
		Parameters map[string]struct {
			Default string `yaml:"Default"`
		} `yaml:"Parameters"`
		Resources map[string]struct {
			Type       string         `yaml:"Type"`
			Properties map[string]any `yaml:"Properties"`
		} `yaml:"Resources"`
	}
	if err := yaml.Unmarshal(raw, &tmpl); err != nil {
		t.Fatal(err)
	}
	rule, perm := tmpl.Resources["ReportSchedule"], tmpl.Resources["ReportSchedulePermission"]
	if rule.Type != "AWS::Events::Rule" || perm.Type != "AWS::Lambda::Permission" {
		t.Fatalf("ReportSchedule %q, ReportSchedulePermission %q: want AWS::Events::Rule and AWS::Lambda::Permission", rule.Type, perm.Type)
	}
	if fmt.Sprint(rule.Properties["ScheduleExpression"]) != "map[Ref:ScheduleExpression]" {
		t.Errorf("schedule %v: want the ScheduleExpression parameter", rule.Properties["ScheduleExpression"])
	}
	targets, _ := rule.Properties["Targets"].([]any)
	if len(targets) != 1 {
		t.Fatalf("targets %v: want the report function", targets)
	}
	target, _ := targets[0].(map[string]any)
	if fmt.Sprint(target["Arn"]) != "map[Ref:ReportFunctionArn]" {
		t.Errorf("target %v: want the ReportFunctionArn parameter", target["Arn"])
	}
	for _, k := range []string{"Input", "InputPath", "InputTransformer"} {
		if _, ok := target[k]; ok {
			t.Errorf("the target sets %s: the function takes only the scheduled event as EventBridge sends it", k)
		}
	}
	p := perm.Properties
	if p["Action"] != "lambda:InvokeFunction" || p["Principal"] != "events.amazonaws.com" ||
		fmt.Sprint(p["FunctionName"]) != "map[Ref:ReportFunctionArn]" ||
		fmt.Sprint(p["SourceArn"]) != "map[Fn::GetAtt:[ReportSchedule Arn]]" {
		t.Errorf("permission %v: want EventBridge to invoke the report function from ReportSchedule only", p)
	}

	period, err := ratePeriod(tmpl.Parameters["ScheduleExpression"].Default)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(dir+"/1m0s", 0o755); err != nil {
		t.Fatal(err)
	}
	s := &report.Scheduled{Job: report.Job{PartialsDir: dir, Format: report.JSON}, Out: io.Discard}
	at := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	var prev report.ScheduledResult
	for i := range 2 {
		ev := events.CloudWatchEvent{DetailType: "Scheduled Event", Source: "aws.events", Time: at.Add(time.Duration(i) * period)}
		res, err := s.Handle(context.Background(), ev)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && !res.From.Equal(prev.To) {
			t.Errorf("on %s the reports cover %v to %v, then %v to %v: a gap or an overlap",
				tmpl.Parameters["ScheduleExpression"].Default, prev.From, prev.To, res.From, res.To)
		}
		prev = res
	}
}

// ratePeriod reads an EventBridge rate expression, such as rate(1 day).
func ratePeriod(expr string) (time.Duration, error) {
	var n int
	var unit string
	if _, err := fmt.Sscanf(expr, "rate(%d %s", &n, &unit); err != nil || n <= 0 {
		return 0, fmt.Errorf("schedule %q: want rate(N unit)", expr)
	}
	d, ok := map[string]time.Duration{"minute": time.Minute, "minutes": time.Minute, "hour": time.Hour,
		"hours": time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour}[strings.TrimSuffix(unit, ")")]
	if !ok {
		return 0, fmt.Errorf("schedule %q: unit %q", expr, unit)
	}
	return time.Duration(n) * d, nil
}
