package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/ratewarden/ratewarden/aggregator"
)

// CloudWatchOptions configure the CloudWatch dashboards and alarms. The
// zero value is usable.
type CloudWatchOptions struct {
	Namespace string // the aggregator's EMF namespace; default "Ratewarden"
	Region    string // the region every widget reads; default "us-east-1"
	Prefix    string // starts every dashboard and alarm name; default "ratewarden"
	// Tiers get a row each on the per-tier dashboard, in this order;
	// without any, the dashboard shows every tier through SEARCH.
	Tiers []string
	// BlockRatio is the share of requests blocked that raises the
	// block-ratio alarm; default 0.25.
	BlockRatio float64
	// FailOpenRatio is the share of requests passed because the counter
	// store failed that raises the fail-open alarm; default 0.01.
	FailOpenRatio float64
	// LagMinutes is how many minutes without any EMF window raise the
	// pipeline-lag alarm; default 5.
	LagMinutes int
	// AlarmActions are the ARNs (SNS topics) alarms notify.
	AlarmActions []string
}

func (o CloudWatchOptions) withDefaults() CloudWatchOptions {
	if o.Namespace == "" {
		o.Namespace = "Ratewarden"
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.Prefix == "" {
		o.Prefix = "ratewarden"
	}
	if o.BlockRatio <= 0 {
		o.BlockRatio = 0.25
	}
	if o.FailOpenRatio <= 0 {
		o.FailOpenRatio = 0.01
	}
	if o.LagMinutes <= 0 {
		o.LagMinutes = 5
	}
	return o
}

// period is every widget's and alarm's period in seconds: the aggregator's
// default window.
const period = 60

// Dashboard is one CloudWatch dashboard: its name and its body, the JSON
// PutDashboard takes.
type Dashboard struct {
	Name string
	Body json.RawMessage
}

// widget is one widget of a dashboard body.
type widget struct {
	Type       string `json:"type"`
	X          int    `json:"x"`
	Y          int    `json:"y"`
	Width      int    `json:"width"`
	Height     int    `json:"height"`
	Properties any    `json:"properties"`
}

type metricProps struct {
	Title   string  `json:"title"`
	Region  string  `json:"region"`
	View    string  `json:"view"`
	Stacked bool    `json:"stacked"`
	Stat    string  `json:"stat"`
	Period  int     `json:"period"`
	Metrics [][]any `json:"metrics"`
	YAxis   any     `json:"yAxis,omitempty"`
}

type textProps struct {
	Markdown string `json:"markdown"`
}

// layout places widgets on the 24-column grid, left to right.
type layout struct {
	ws   []widget
	x, y int
	rowH int
}

func (l *layout) add(width, height int, typ string, props any) {
	if l.x+width > 24 {
		l.x, l.y, l.rowH = 0, l.y+l.rowH, 0
	}
	l.ws = append(l.ws, widget{Type: typ, X: l.x, Y: l.y, Width: width, Height: height, Properties: props})
	l.x += width
	l.rowH = max(l.rowH, height)
}

func (l *layout) text(md string) { l.add(24, 2, "text", textProps{Markdown: md}) }

func (l *layout) body() json.RawMessage {
	return marshal(struct {
		Widgets []widget `json:"widgets"`
	}{l.ws})
}

// marshal encodes v without escaping <, > and &, which metric math uses.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // only static types
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// cw builds metric rows for one set of options.
type cw struct{ o CloudWatchOptions }

func (c cw) graph(title, stat string, stacked bool, rows ...[]any) metricProps {
	return metricProps{Title: title, Region: c.o.Region, View: "timeSeries", Stacked: stacked, Stat: stat, Period: period, Metrics: rows}
}

// metric is a metric row: namespace, name, then dimension name and value
// pairs, then the rendering options.
func (c cw) metric(name string, opts map[string]any, dims ...string) []any {
	row := []any{c.o.Namespace, name}
	for _, d := range dims {
		row = append(row, d)
	}
	if opts != nil {
		row = append(row, opts)
	}
	return row
}

// search is a SEARCH expression row over the metrics of exactly the
// dimension keys dims, named name, with filters such as Tier="free".
func (c cw) search(id, name, stat string, dims []string, filters ...string) []any {
	schema := append([]string{c.o.Namespace}, dims...)
	q := "{" + strings.Join(schema, ",") + "} MetricName=\"" + name + "\""
	for _, f := range filters {
		q += " " + f
	}
	expr := "SEARCH('" + q + "', '" + stat + "', " + strconv.Itoa(period) + ")"
	return []any{map[string]any{"expression": expr, "id": id}}
}

func expr(id, e, label string) []any {
	return []any{map[string]any{"expression": e, "id": id, "label": label}}
}

// Dashboards returns the overview, per-tier and abuse dashboards: every
// metric and dimension set they name is one the aggregator's EMF documents
// carry (aggregator.Metric*, aggregator.Dim*).
func Dashboards(o CloudWatchOptions) []Dashboard {
	o = o.withDefaults()
	c := cw{o}
	tier, rule, outcome, node := aggregator.DimTier, aggregator.DimRule, aggregator.DimOutcome, aggregator.DimNode
	hidden := func(id string) map[string]any { return map[string]any{"id": id, "visible": false} }

	var ov layout
	ov.text("# ratewarden: overview\nEvery number is summed from the aggregator's EMF documents (namespace `" + o.Namespace + "`), one per window, so it agrees with the local dashboard.")
	ov.add(12, 6, "metric", c.graph("Requests by outcome", "Sum", true,
		c.metric(aggregator.MetricAllowed, nil),
		c.metric(aggregator.MetricChallenged, nil),
		c.metric(aggregator.MetricBlocked, nil),
		c.metric(aggregator.MetricFailOpen, nil),
		c.metric(aggregator.MetricFailClosed, nil),
		c.metric(aggregator.MetricDenyListed, nil),
		c.metric(aggregator.MetricRejected, nil)))
	ov.add(12, 6, "metric", c.graph("Requests with the expected band", "Sum", false,
		c.metric(aggregator.MetricRequests, map[string]any{"id": "m1"}),
		expr("ad1", "ANOMALY_DETECTION_BAND(m1, 2)", "expected")))
	ov.add(8, 6, "metric", c.graph("Block ratio", "Sum", false,
		c.metric(aggregator.MetricBlocked, hidden("b")),
		c.metric(aggregator.MetricRequests, hidden("r")),
		expr("ratio", "IF(r > 0, b / r, 0)", "blocked / requests")))
	ov.add(8, 6, "metric", c.graph("Counter store latency", "p99", false,
		c.metric(aggregator.MetricStoreLatency, map[string]any{"stat": "p50", "label": "p50"}),
		c.metric(aggregator.MetricStoreLatency, map[string]any{"stat": "p99", "label": "p99"})))
	ov.add(8, 6, "metric", c.graph("Pipeline: decisions dropped, windows", "Sum", false,
		c.metric(aggregator.MetricDecisionsDropped, map[string]any{"label": "dropped by the edges"}),
		c.metric(aggregator.MetricRequests, map[string]any{"stat": "SampleCount", "label": "windows received"})))
	ov.add(12, 6, "metric", c.graph("Requests by outcome (dimension)", "Sum", true,
		c.search("o1", aggregator.MetricRequests, "Sum", []string{outcome})))
	ov.add(12, 6, "metric", c.graph("Requests by edge node", "Sum", true,
		c.search("n1", aggregator.MetricRequests, "Sum", []string{node})))

	var tiers layout
	tiers.text("# ratewarden: tiers and rules\nRules past the aggregator's cardinality budget are folded into `" + aggregator.OtherRule + "`.")
	names := o.Tiers
	if len(names) == 0 {
		names = []string{""}
	}
	for i, t := range names {
		var filter []string
		label := "every tier"
		if t != "" {
			filter = []string{tier + "=\"" + strings.ReplaceAll(t, `"`, `\"`) + "\""}
			label = t
		}
		id := strconv.Itoa(i)
		tiers.add(8, 6, "metric", c.graph(label+": requests", "Sum", false,
			c.search("t"+id, aggregator.MetricRequests, "Sum", []string{tier}, filter...)))
		tiers.add(8, 6, "metric", c.graph(label+": blocked and challenged", "Sum", false,
			c.search("tb"+id, aggregator.MetricBlocked, "Sum", []string{tier}, filter...),
			c.search("tc"+id, aggregator.MetricChallenged, "Sum", []string{tier}, filter...)))
		tiers.add(8, 6, "metric", c.graph(label+": blocked by rule (path)", "Sum", true,
			c.search("rb"+id, aggregator.MetricBlocked, "Sum", []string{tier, rule}, filter...)))
	}
	tiers.add(12, 6, "metric", c.graph("Requests by rule (path)", "Sum", false,
		c.search("r1", aggregator.MetricRequests, "Sum", []string{tier, rule})))
	tiers.add(12, 6, "metric", c.graph("Distinct clients by tier", "Sum", false,
		c.search("u1", aggregator.MetricUniqueClients, "Sum", []string{tier})))

	var abuse layout
	abuse.text("# ratewarden: abuse\nRefusals by rule, challenges answered with a token, lists and origin health.")
	abuse.add(12, 6, "metric", c.graph("Blocked by rule (path)", "Sum", true,
		c.search("a1", aggregator.MetricBlocked, "Sum", []string{tier, rule})))
	abuse.add(12, 6, "metric", c.graph("Challenged by rule (path)", "Sum", true,
		c.search("a2", aggregator.MetricChallenged, "Sum", []string{tier, rule})))
	abuse.add(8, 6, "metric", c.graph("Challenges solved (token passes) per challenge", "Sum", false,
		c.metric(aggregator.MetricTokenPassed, hidden("tp")),
		c.metric(aggregator.MetricChallenged, hidden("ch")),
		expr("solve", "IF(ch > 0, tp / ch, 0)", "token passes / challenges")))
	abuse.add(8, 6, "metric", c.graph("Lists", "Sum", false,
		c.metric(aggregator.MetricDenyListed, nil),
		c.metric(aggregator.MetricAllowListed, nil)))
	abuse.add(8, 6, "metric", c.graph("Store failures and fallbacks", "Sum", false,
		c.metric(aggregator.MetricFailOpen, nil),
		c.metric(aggregator.MetricFailClosed, nil),
		c.metric(aggregator.MetricLocalLimit, nil),
		c.metric(aggregator.MetricShadowBlocked, nil)))
	abuse.add(12, 6, "metric", c.graph("Distinct clients", "Sum", false,
		c.metric(aggregator.MetricUniqueClients, nil)))
	abuse.add(12, 6, "metric", c.graph("Origin errors and timeouts", "Sum", false,
		c.metric(aggregator.MetricOriginErrors, nil),
		c.metric(aggregator.MetricOriginTimeouts, nil)))

	return []Dashboard{
		{Name: o.Prefix + "-overview", Body: ov.body()},
		{Name: o.Prefix + "-tiers", Body: tiers.body()},
		{Name: o.Prefix + "-abuse", Body: abuse.body()},
	}
}

// Alarm is one CloudWatch alarm, with PutMetricAlarm's field names: the
// JSON `aws cloudwatch put-metric-alarm --cli-input-json` takes and the
// properties of an AWS::CloudWatch::Alarm.
type Alarm struct {
	AlarmName          string
	AlarmDescription   string
	ActionsEnabled     bool
	AlarmActions       []string      `json:",omitempty"`
	Metrics            []MetricQuery `json:",omitempty"`
	Namespace          string        `json:",omitempty"`
	MetricName         string        `json:",omitempty"`
	Dimensions         []Dimension   `json:",omitempty"`
	Statistic          string        `json:",omitempty"`
	Period             int32         `json:",omitempty"`
	EvaluationPeriods  int32
	DatapointsToAlarm  int32 `json:",omitempty"`
	Threshold          float64
	ComparisonOperator string
	TreatMissingData   string
}

// Dimension is a metric dimension.
type Dimension struct {
	Name  string
	Value string
}

// MetricQuery is one metric or expression of a metric-math alarm.
type MetricQuery struct {
	Id         string      //nolint:revive // PutMetricAlarm's field name
	Expression string      `json:",omitempty"`
	Label      string      `json:",omitempty"`
	MetricStat *MetricStat `json:",omitempty"`
	ReturnData bool
}

// MetricStat is one metric and its statistic.
type MetricStat struct {
	Metric Metric
	Period int32
	Stat   string
}

// Metric names a metric.
type Metric struct {
	Namespace  string
	MetricName string
	Dimensions []Dimension `json:",omitempty"`
}

// Alarms returns the block-ratio spike, fail-open surge and pipeline-lag
// alarms over the aggregator's service-wide metrics.
func Alarms(o CloudWatchOptions) []Alarm {
	o = o.withDefaults()
	stat := func(id, name string) MetricQuery {
		return MetricQuery{Id: id, MetricStat: &MetricStat{Metric: Metric{Namespace: o.Namespace, MetricName: name}, Period: period, Stat: "Sum"}}
	}
	actions := o.AlarmActions
	// ratio alarms when num / Requests is over threshold in n of m minutes.
	ratio := func(name, desc, id, metric string, threshold float64, n, m int32) Alarm {
		return Alarm{
			AlarmName: o.Prefix + "-" + name, AlarmDescription: desc,
			ActionsEnabled: len(actions) > 0, AlarmActions: actions,
			Metrics: []MetricQuery{stat(id, metric), stat("requests", aggregator.MetricRequests),
				{Id: "ratio", Expression: "IF(requests > 0, " + id + " / requests, 0)", Label: id + " / requests", ReturnData: true}},
			EvaluationPeriods: m, DatapointsToAlarm: n, Threshold: threshold,
			ComparisonOperator: "GreaterThanThreshold", TreatMissingData: "notBreaching",
		}
	}
	return []Alarm{
		ratio("block-ratio-spike", fmt.Sprintf("More than %g of requests blocked in 3 of 5 minutes: an attack, or a limit set too low.", o.BlockRatio),
			"blocked", aggregator.MetricBlocked, o.BlockRatio, 3, 5),
		ratio("fail-open-surge", fmt.Sprintf("More than %g of requests passed unchecked because the counter store failed, 2 minutes running.", o.FailOpenRatio),
			"failopen", aggregator.MetricFailOpen, o.FailOpenRatio, 2, 2),
		{
			// Every window the aggregator emits carries a service-wide
			// Requests value, so minutes without one are minutes the
			// pipeline has not delivered (or had no traffic).
			AlarmName:        o.Prefix + "-pipeline-lag",
			AlarmDescription: fmt.Sprintf("No aggregated window for %d minutes: the aggregator is stopped or behind (or the edge saw no traffic).", o.LagMinutes),
			ActionsEnabled:   len(actions) > 0, AlarmActions: actions,
			Namespace: o.Namespace, MetricName: aggregator.MetricRequests, Statistic: "SampleCount", Period: period,
			EvaluationPeriods: int32(o.LagMinutes), DatapointsToAlarm: int32(o.LagMinutes), Threshold: 1,
			ComparisonOperator: "LessThanThreshold", TreatMissingData: "breaching",
		},
	}
}
