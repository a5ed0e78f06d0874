package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	dkinesis "github.com/ratewarden/ratewarden/decisions/kinesis"
	"github.com/ratewarden/ratewarden/edge/dynamostore"
	"github.com/ratewarden/ratewarden/edge/lists"
)

// Default names of the AWS resources, as deploy/cloudformation.yaml names
// them.
const (
	defaultStream        = "ratewarden-decisions"
	defaultCountersTable = "ratewarden-counters"
	defaultListsTable    = "ratewarden-lists"
	defaultLeasesTable   = "ratewarden-leases"
	defaultStateTable    = "ratewarden-aggregator-state"
	defaultPartialsTable = "ratewarden-partials"
)

// checkAWSNames checks aws init's stream and table names as AWS would: a
// name it refuses is a bad flag; "" skips the resource.
func checkAWSNames(fs *flag.FlagSet) error {
	for _, name := range []string{"stream", "counters-table", "lists-table", "leases-table", "state-table", "partials-table"} {
		v := fs.Lookup(name).Value.String()
		switch {
		case v == "":
		case name == "stream" && !config.ValidStreamName(v):
			return badFlag(fmt.Errorf(`aws init: --stream %q: want 1 to 128 of a-z, A-Z, 0-9, _ . -, or "" to skip`, v))
		case name != "stream" && !config.ValidTableName(v):
			return badFlag(fmt.Errorf(`aws init: --%s %q: want 3 to 255 of a-z, A-Z, 0-9, _ . -, or "" to skip`, name, v))
		}
	}
	return nil
}

func runAWS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprintln(stdout, "Usage: ratewarden aws init [flags]")
		return nil
	}
	if len(args) == 0 || args[0] != "init" {
		fmt.Fprintln(stderr, "Usage: ratewarden aws init [flags]")
		return errUsage
	}
	fs := newFlags("aws init", "aws init [flags]", stderr)
	region := fs.String("region", "", "AWS `region` (default: the SDK's, from AWS_REGION or the profile)")
	endpoint := fs.String("endpoint-url", "", "send every call to `URL` instead (default: the SDK's, from AWS_ENDPOINT_URL and friends)")
	kinesisEP := fs.String("kinesis-endpoint", "", "send Kinesis calls to `URL`")
	dynamoEP := fs.String("dynamodb-endpoint", "", "send DynamoDB calls to `URL`")
	stream := fs.String("stream", defaultStream, "decision stream `name`; \"\" to skip")
	shards := fs.Int("shards", 1, "shards of a new stream (`n`)")
	counters := fs.String("counters-table", defaultCountersTable, "counter store table `name`; \"\" to skip")
	listsTable := fs.String("lists-table", defaultListsTable, "lists table `name`; \"\" to skip")
	leases := fs.String("leases-table", defaultLeasesTable, "stream consumers' lease and checkpoint table `name`; \"\" to skip")
	state := fs.String("state-table", defaultStateTable, "the aggregators' state table `name` (aggregate --state-table); \"\" to skip")
	partialsTable := fs.String("partials-table", defaultPartialsTable, "the aggregators' partials table `name` (aggregate --partials dynamodb:NAME); \"\" to skip")
	wait := fs.Duration("wait", 2*time.Minute, "how long to wait for each resource to become active")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	// Every name is checked before anything is created: a name AWS
	// refuses, found after the rest was made, would leave a half-done init.
	if err := checkAWSNames(fs); err != nil {
		return err
	}
	switch {
	case *shards < 1:
		return badFlag(fmt.Errorf("aws init: --shards %d: want 1 or more", *shards))
	case *wait <= 0:
		return badFlag(fmt.Errorf("aws init: --wait %v: want more than 0", *wait))
	}
	cfg, err := assemble.AWS(ctx, *region)
	if err != nil {
		return err
	}
	override(kinesisEP, *endpoint)
	override(dynamoEP, *endpoint)
	kc := kinesis.NewFromConfig(cfg, func(o *kinesis.Options) {
		if *kinesisEP != "" {
			o.BaseEndpoint = kinesisEP
		}
	})
	dc := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if *dynamoEP != "" {
			o.BaseEndpoint = dynamoEP
		}
	})
	in := awsInit{kc: kc, dc: dc, out: stdout, wait: *wait}
	var errs []error
	if *stream != "" {
		errs = append(errs, in.stream(ctx, *stream, int32(*shards)))
	}
	for _, t := range []struct {
		name string
		spec func(string) *dynamodb.CreateTableInput
		ttl  func(string) *dynamodb.UpdateTimeToLiveInput
	}{
		{*counters, dynamostore.TableSpec, dynamostore.TimeToLiveSpec},
		{*listsTable, lists.TableSpec, lists.TimeToLiveSpec},
		{*leases, dkinesis.LeaseTableSpec, nil},
		{*state, aggregator.StateTableSpec, nil},
		{*partialsTable, aggregator.PartialsTableSpec, nil},
	} {
		if t.name != "" {
			errs = append(errs, in.table(ctx, t.spec(t.name), t.ttl))
		}
	}
	return errors.Join(errs...)
}

// awsInit creates resources if they are missing and says what it found.
type awsInit struct {
	kc   *kinesis.Client
	dc   *dynamodb.Client
	out  io.Writer
	wait time.Duration
}

func (a *awsInit) stream(ctx context.Context, name string, shards int32) error {
	_, err := a.kc.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)})
	var inUse *kintypes.ResourceInUseException
	switch {
	case errors.As(err, &inUse):
		fmt.Fprintf(a.out, "stream %s: exists\n", name)
	case err != nil:
		return fmt.Errorf("create stream %s: %w", name, err)
	default:
		fmt.Fprintf(a.out, "stream %s: created with %d shards\n", name, shards)
	}
	w := kinesis.NewStreamExistsWaiter(a.kc, func(o *kinesis.StreamExistsWaiterOptions) { o.MinDelay = 100 * time.Millisecond })
	if err := w.Wait(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(name)}, a.wait); err != nil {
		return fmt.Errorf("stream %s: not active: %w", name, err)
	}
	return nil
}

func (a *awsInit) table(ctx context.Context, spec *dynamodb.CreateTableInput, ttl func(string) *dynamodb.UpdateTimeToLiveInput) error {
	name := aws.ToString(spec.TableName)
	_, err := a.dc.CreateTable(ctx, spec)
	var inUse *ddbtypes.ResourceInUseException
	switch {
	case errors.As(err, &inUse):
		fmt.Fprintf(a.out, "table %s: exists\n", name)
	case err != nil:
		return fmt.Errorf("create table %s: %w", name, err)
	default:
		fmt.Fprintf(a.out, "table %s: created\n", name)
	}
	w := dynamodb.NewTableExistsWaiter(a.dc, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 100 * time.Millisecond })
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, a.wait); err != nil {
		return fmt.Errorf("table %s: not active: %w", name, err)
	}
	if ttl == nil {
		return nil
	}
	in := ttl(name)
	attr := aws.ToString(in.TimeToLiveSpecification.AttributeName)
	_, err = a.dc.UpdateTimeToLive(ctx, in)
	var ae smithy.APIError
	switch {
	case err == nil:
		fmt.Fprintf(a.out, "table %s: time to live on %s\n", name, attr)
	case errors.As(err, &ae) && ae.ErrorCode() == "ValidationException" &&
		(strings.Contains(ae.ErrorMessage(), "already enabled") || strings.Contains(ae.ErrorMessage(), "TimeToLive is active")):
		fmt.Fprintf(a.out, "table %s: time to live on %s already\n", name, attr)
	case errors.As(err, &ae) && (ae.ErrorCode() == "UnknownOperationException" || ae.ErrorCode() == "UnrecognizedClientException"):
		// The local stand-ins have no time to live; counters carry their
		// expiry and readers compare it, so only the clean-up is missing.
		fmt.Fprintf(a.out, "table %s: time to live not supported by this endpoint (%s); expired items stay until deleted\n", name, ae.ErrorCode())
	default:
		return fmt.Errorf("table %s: enable time to live: %w", name, err)
	}
	return nil
}
