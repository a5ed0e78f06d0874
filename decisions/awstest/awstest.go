// Package awstest gives tests the real-protocol stand-ins that tests/run
// starts on loopback (kinesalite for Kinesis, dynalite for DynamoDB): their
// endpoints and an AWS SDK configuration with static test credentials.
package awstest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratewarden/ratewarden/internal/sdkhttp"
)

// The environment variables tests/run sets to the stand-ins' endpoints.
const (
	KinesisEnv  = "RATEWARDEN_TEST_KINESIS_ENDPOINT"
	DynamoDBEnv = "RATEWARDEN_TEST_DYNAMODB_ENDPOINT"
	// RedisEnv holds host:port of the redis-server tests/run starts; it is
	// not an AWS service, but it is started and found the same way.
	RedisEnv = "RATEWARDEN_TEST_REDIS_ADDR"
)

// Endpoint returns the endpoint in env. Outside tests/run the test is
// skipped with a pointer to it; under CI (CI set) a missing endpoint fails
// the test, so nothing is skipped there.
func Endpoint(t testing.TB, env string) string {
	t.Helper()
	ep := os.Getenv(env)
	if ep == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set: tests/run starts the stand-ins and sets it", env)
		}
		t.Skipf("%s is not set: run tests/run, which starts kinesalite, dynalite and redis-server on loopback", env)
	}
	return ep
}

// Config returns an SDK configuration for the stand-ins: a fixed region and
// static credentials, never the machine's.
func Config(t testing.TB) aws.Config {
	t.Helper()
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPClient = sdkhttp.New() // as the binary's (assemble.AWS)
	return cfg
}

// CreateTable creates the table spec describes through dc, waits until it
// is active, and deletes it when the test ends.
func CreateTable(t testing.TB, dc *dynamodb.Client, spec *dynamodb.CreateTableInput) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := aws.ToString(spec.TableName)
	if _, err := dc.CreateTable(ctx, spec); err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := dc.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: spec.TableName}); err != nil {
			t.Errorf("delete table %s: %v", name, err)
		}
	})
	waiter := dynamodb.NewTableExistsWaiter(dc, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 20 * time.Millisecond })
	if err := waiter.Wait(ctx, &dynamodb.DescribeTableInput{TableName: spec.TableName}, 30*time.Second); err != nil {
		t.Fatalf("wait for table %s: %v", name, err)
	}
}
