package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/dashboards"
)

// dashboardPrefix matches the prefixes whose dashboard names CloudWatch
// takes (A-Z, a-z, 0-9, - and _, at most 255 with the longest suffix).
var dashboardPrefix = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

// listFlag is a flag that may be given several times.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func runDashboards(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dashboards", "dashboards (--out DIR | --apply) [--config FILE] [--namespace NS] [--region R] [flags]", stderr)
	out := fs.String("out", "", "write the dashboard bodies, the alarms (PutMetricAlarm JSON) and a CloudFormation template under `directory`")
	apply := fs.Bool("apply", false, "create or replace the dashboards and alarms in CloudWatch (PutDashboard, PutMetricAlarm; AWS SDK credentials, region and endpoints)")
	cfgPath := fs.String("config", "", "configuration `file` whose tiers get a row each on the tiers dashboard (default: the built-in seed configuration)")
	namespace := fs.String("namespace", "Ratewarden", "the aggregator's CloudWatch `namespace` (aggregate --namespace)")
	region := fs.String("region", "", "the `region` of the metrics (default: the SDK's, else us-east-1 for --out)")
	prefix := fs.String("prefix", "ratewarden", "`prefix` of every dashboard and alarm name (A-Z, a-z, 0-9, - and _)")
	blockRatio := fs.Float64("block-ratio", 0.25, "share of requests blocked that raises the block-ratio alarm (`ratio`)")
	failOpen := fs.Float64("fail-open-ratio", 0.01, "share of requests failed open that raises the fail-open alarm (`ratio`)")
	lag := fs.Int("lag-minutes", 5, "`minutes` without an aggregated window that raise the pipeline-lag alarm")
	var actions listFlag
	fs.Var(&actions, "alarm-action", "`ARN` (an SNS topic, arn:aws:sns:REGION:ACCOUNT:NAME) the alarms notify; repeatable")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if (*out == "" && !*apply) || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	switch {
	case !(*blockRatio > 0 && *blockRatio < 1):
		return badFlag(fmt.Errorf("dashboards: --block-ratio %v: want more than 0 and less than 1", *blockRatio))
	case !(*failOpen > 0 && *failOpen < 1):
		return badFlag(fmt.Errorf("dashboards: --fail-open-ratio %v: want more than 0 and less than 1", *failOpen))
	case *lag < 1 || *lag > 60:
		return badFlag(fmt.Errorf("dashboards: --lag-minutes %d: want 1 to 60", *lag))
	case !dashboardPrefix.MatchString(*prefix):
		return badFlag(fmt.Errorf("dashboards: --prefix %q: want 1 to 200 of A-Z, a-z, 0-9, - and _ (CloudWatch's dashboard names)", *prefix))
	}
	if err := assemble.CheckNamespace(*namespace); err != nil {
		return badFlag(fmt.Errorf("dashboards: %w", err))
	}
	for _, a := range actions {
		// arn:partition:service:region:account:resource, the form
		// PutMetricAlarm takes (region and account may be empty).
		if f := strings.SplitN(a, ":", 6); len(f) < 6 || f[0] != "arn" || f[1] == "" || f[2] == "" || f[5] == "" {
			return badFlag(fmt.Errorf("dashboards: --alarm-action %q: want an ARN, such as arn:aws:sns:us-east-1:123456789012:ops", a))
		}
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	o := dashboards.CloudWatchOptions{Namespace: *namespace, Region: *region, Prefix: *prefix,
		Tiers: slices.Sorted(maps.Keys(cfg.Tiers)), BlockRatio: *blockRatio, FailOpenRatio: *failOpen,
		LagMinutes: *lag, AlarmActions: actions}
	var client *cloudwatch.Client
	if *apply {
		awsCfg, err := assemble.AWS(ctx, *region)
		if err != nil {
			return err
		}
		o.Region = awsCfg.Region
		client = cloudwatch.NewFromConfig(awsCfg)
	}
	if *out != "" {
		paths, err := dashboards.Write(*out, o)
		for _, p := range paths {
			fmt.Fprintln(stdout, "wrote", p)
		}
		if err != nil {
			return err
		}
	}
	if client != nil {
		ds, as := dashboards.Dashboards(o), dashboards.Alarms(o)
		if err := dashboards.Apply(ctx, client, ds, as); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "applied %d dashboards and %d alarms in %s\n", len(ds), len(as), o.Region)
	}
	return nil
}
