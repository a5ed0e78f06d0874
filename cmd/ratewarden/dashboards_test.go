package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/smithy-go/encoding/cbor"

	"github.com/ratewarden/ratewarden/dashboards"
)

// cloudWatchServer decodes PutDashboard and PutMetricAlarm as the SDK sends
// them (Smithy RPC v2 CBOR) and keeps what it received.
type cloudWatchServer struct {
	t          *testing.T
	mu         sync.Mutex
	dashboards map[string]string    // name → body
	alarms     map[string]cbor.Map  // name → request
	validation map[string]cbor.List // dashboard name → validation messages to answer
	ops        []string             // operations in order
}

func (s *cloudWatchServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := s.t
	op, ok := strings.CutPrefix(r.URL.Path, "/service/GraniteServiceVersion20100801/operation/")
	if r.Method != http.MethodPost || !ok {
		t.Errorf("%s %s: not a CloudWatch RPC v2 operation", r.Method, r.URL.Path)
	}
	if r.Header.Get("Smithy-Protocol") != "rpc-v2-cbor" || r.Header.Get("Content-Type") != "application/cbor" {
		t.Errorf("%s: smithy-protocol %q content-type %q", op, r.Header.Get("Smithy-Protocol"), r.Header.Get("Content-Type"))
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDTEST/") {
		t.Errorf("%s: authorization %q, want a SigV4 signature", op, r.Header.Get("Authorization"))
	}
	raw, _ := io.ReadAll(r.Body)
	v, err := cbor.Decode(raw)
	if err != nil {
		t.Errorf("%s: decode CBOR: %v", op, err)
		return
	}
	in := v.(cbor.Map)
	str := func(k string) string { s, _ := in[k].(cbor.String); return string(s) }
	w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
	w.Header().Set("Content-Type", "application/cbor")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops = append(s.ops, op)
	switch op {
	case "PutDashboard":
		s.dashboards[str("DashboardName")] = str("DashboardBody")
		out := cbor.Map{}
		if msgs, ok := s.validation[str("DashboardName")]; ok {
			out["DashboardValidationMessages"] = msgs
		}
		w.Write(cbor.Encode(out))
	case "PutMetricAlarm":
		s.alarms[str("AlarmName")] = in
		w.Write(cbor.Encode(cbor.Map{}))
	default:
		t.Errorf("unexpected operation %s", op)
		w.WriteHeader(http.StatusBadRequest)
	}
}

func newCloudWatchServer(t *testing.T) *cloudWatchServer {
	s := &cloudWatchServer{t: t, dashboards: map[string]string{}, alarms: map[string]cbor.Map{}, validation: map[string]cbor.List{}}
	useCloudWatch(t, s)
	return s
}

// useCloudWatch serves h as the CloudWatch endpoint of the SDK's standard
// configuration, in region eu-west-1 with static credentials from the
// environment, until the test ends.
func useCloudWatch(t *testing.T, h http.Handler) {
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL_CLOUDWATCH": hs.URL, "AWS_REGION": "eu-west-1",
		"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "",
		"AWS_PROFILE": "", "AWS_CONFIG_FILE": filepath.Join(t.TempDir(), "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "none"),
	} {
		t.Setenv(k, v)
	}
}

// TestDashboardsApply: --apply puts every dashboard and alarm --out
// writes, over CloudWatch's wire protocol, with the bodies and alarm
// fields unchanged and the SDK's region in every widget.
func TestDashboardsApply(t *testing.T) {
	srv := newCloudWatchServer(t)
	dir := t.TempDir()
	code, out, errs := runCLI(t, nil, "dashboards", "--apply", "--out", dir, "--namespace", "Shop", "--alarm-action", "arn:aws:sns:eu-west-1:123456789012:oncall")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, "applied 3 dashboards and 3 alarms in eu-west-1") {
		t.Errorf("output %q", out)
	}
	o := dashboards.CloudWatchOptions{Namespace: "Shop", Region: "eu-west-1", Tiers: []string{"anonymous", "authenticated", "enterprise", "free", "pro"},
		AlarmActions: []string{"arn:aws:sns:eu-west-1:123456789012:oncall"}}
	for _, d := range dashboards.Dashboards(o) {
		got, ok := srv.dashboards[d.Name]
		if !ok {
			t.Errorf("dashboard %s not put", d.Name)
			continue
		}
		if got != string(d.Body) {
			t.Errorf("dashboard %s: body\n%s\nwant\n%s", d.Name, got, d.Body)
		}
		if !strings.Contains(got, `"region":"eu-west-1"`) || !strings.Contains(got, `SEARCH('{Shop,`) {
			t.Errorf("dashboard %s: region or namespace missing", d.Name)
		}
		written, err := os.ReadFile(filepath.Join(dir, "dashboard-"+d.Name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		json.Unmarshal(written, &a)
		json.Unmarshal(d.Body, &b)
		if ja, _ := json.Marshal(a); string(ja) != func() string { jb, _ := json.Marshal(b); return string(jb) }() {
			t.Errorf("dashboard %s: --out wrote another body than --apply put", d.Name)
		}
	}
	if len(srv.alarms) != 3 {
		t.Fatalf("%d alarms put, want 3: %v", len(srv.alarms), srv.ops)
	}
	ratio := srv.alarms["ratewarden-block-ratio-spike"]
	metrics, _ := ratio["Metrics"].(cbor.List)
	if len(metrics) != 3 {
		t.Fatalf("block ratio: %d metric queries, want 3", len(metrics))
	}
	q0 := metrics[0].(cbor.Map)
	stat := q0["MetricStat"].(cbor.Map)
	m := stat["Metric"].(cbor.Map)
	if m["Namespace"] != cbor.String("Shop") || m["MetricName"] != cbor.String("Blocked") || stat["Stat"] != cbor.String("Sum") {
		t.Errorf("block ratio: first query %v", q0)
	}
	if e := metrics[2].(cbor.Map); e["Expression"] != cbor.String("IF(requests > 0, blocked / requests, 0)") || e["ReturnData"] != cbor.Bool(true) {
		t.Errorf("block ratio: expression %v", e)
	}
	if th, _ := cbor.AsFloat64(ratio["Threshold"]); th != 0.25 || ratio["ComparisonOperator"] != cbor.String("GreaterThanThreshold") {
		t.Errorf("block ratio: threshold %v %v", ratio["Threshold"], ratio["ComparisonOperator"])
	}
	if acts, _ := ratio["AlarmActions"].(cbor.List); len(acts) != 1 || acts[0] != cbor.String("arn:aws:sns:eu-west-1:123456789012:oncall") || ratio["ActionsEnabled"] != cbor.Bool(true) {
		t.Errorf("block ratio: actions %v enabled %v", ratio["AlarmActions"], ratio["ActionsEnabled"])
	}
	lag := srv.alarms["ratewarden-pipeline-lag"]
	if lag["MetricName"] != cbor.String("Requests") || lag["Statistic"] != cbor.String("SampleCount") || lag["TreatMissingData"] != cbor.String("breaching") {
		t.Errorf("pipeline lag: %v", lag)
	}
	if p, _ := cbor.AsFloat64(lag["Period"]); p != 60 {
		t.Errorf("pipeline lag: period %v", lag["Period"])
	}
}

// TestDashboardsApplyRefused: a body CloudWatch finds fault with fails the
// command, naming the dashboard and the message.
func TestDashboardsApplyRefused(t *testing.T) {
	srv := newCloudWatchServer(t)
	srv.validation["ratewarden-tiers"] = cbor.List{cbor.Map{"DataPath": cbor.String("/widgets/1"), "Message": cbor.String("Should have required property 'region'")}}
	code, out, errs := runCLI(t, nil, "dashboards", "--apply")
	if code != 1 || !strings.Contains(errs, "put dashboard ratewarden-tiers: /widgets/1: Should have required property 'region'") {
		t.Errorf("exit %d\n%s%s", code, out, errs)
	}
	if len(srv.alarms) != 0 {
		t.Errorf("alarms put after a refused dashboard: %v", srv.ops)
	}
}

// TestDashboardsFlags: bad values are refused with what is allowed.
func TestDashboardsFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"dashboards"}, 2, "Usage: ratewarden dashboards"},
		{[]string{"dashboards", "--out", t.TempDir(), "--block-ratio", "2"}, 2, "--block-ratio 2: want more than 0 and less than 1"},
		{[]string{"dashboards", "--out", t.TempDir(), "--lag-minutes", "0"}, 2, "--lag-minutes 0: want 1 to 60"},
		{[]string{"dashboards", "--out", t.TempDir(), "--config", "nope.yaml"}, 1, "nope.yaml"},
		// CloudWatch names a dashboard with A-Z, a-z, 0-9, - and _ only:
		// --out failed to open "DIR/dashboard-my prefix/x-overview.json",
		// exit 1, and --apply had PutDashboard refuse it.
		{[]string{"dashboards", "--out", t.TempDir(), "--prefix", "my prefix/x"}, 2, `--prefix "my prefix/x": want 1 to 200 of A-Z, a-z, 0-9, - and _`},
		// Not an ARN: written into every alarm, and with --apply refused by
		// PutMetricAlarm after the dashboards were put.
		{[]string{"dashboards", "--out", t.TempDir(), "--alarm-action", "ops-topic"}, 2, `--alarm-action "ops-topic": want an ARN, such as arn:aws:sns:us-east-1:123456789012:ops`},
		{[]string{"dashboards", "--out", t.TempDir(), "--alarm-action", "arn:aws:sns:us-east-1:123456789012:ops"}, 0, "wrote"},
	} {
		code, out, errs := runCLI(t, nil, c.args...)
		if code != c.code || !strings.Contains(out+errs, c.want) {
			t.Errorf("%v: exit %d, want %d; output lacks %q:\n%s%s", c.args, code, c.code, c.want, out, errs)
		}
	}
}
