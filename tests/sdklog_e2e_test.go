package tests

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratewarden/ratewarden/decisions/awstest"
)

// TestSDKLogsStructured: the AWS SDK's own warnings come out of the binary
// in its log format (level=WARN, component=aws-sdk), not as lines of the
// SDK's own ("SDK 2026/12/02 ... WARN ..."). `ratewarden aws init` creates
// a table on dynalite through a proxy that spoils each response's Date
// header, which the SDK warns about.
func TestSDKLogsStructured(t *testing.T) {
	bin := buildBinary(t)
	target, err := url.Parse(awstest.Endpoint(t, awstest.DynamoDBEnv))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(r *http.Response) error {
		r.Header.Set("Date", "not a date")
		return nil
	}
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	table := fmt.Sprint("e2e-sdklog-", time.Now().UnixNano())
	dc := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(target.String()) })
	t.Cleanup(func() { dc.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)}) })
	env := append(standInEnv(t), "AWS_ENDPOINT_URL_DYNAMODB="+srv.URL)
	out := runBinary(t, bin, env, "aws", "init", "--stream", "", "--counters-table", "", "--lists-table", "",
		"--leases-table", "", "--state-table", "", "--partials-table", table)
	if !strings.Contains(out, "table "+table+": created") {
		t.Fatalf("aws init said:\n%s", out)
	}
	warned := false
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "SDK ") {
			t.Errorf("a line in the SDK's own format: %q", line)
		}
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "component=aws-sdk") && strings.Contains(line, "Date header") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no WARN record of component aws-sdk about the Date header in:\n%s", out)
	}
}
