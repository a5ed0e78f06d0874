package assemble

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// TestAWSLogsThroughSlog: with a logger in the context (WithLog), the
// SDK's own warnings reach it as structured records, at level WARN with
// component=aws-sdk, not as lines of the SDK's format on stderr. A server
// on loopback answers DynamoDB's ListTables with a Date header the SDK
// cannot parse, which it warns about.
func TestAWSLogsThroughSlog(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("Date", "not a date")
		w.Write([]byte(`{"TableNames":[]}`))
	}))
	defer srv.Close()
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_ENDPOINT_URL", srv.URL)
	for _, withLog := range []bool{true, false} {
		var buf bytes.Buffer
		ctx := context.Background()
		if withLog {
			ctx = WithLog(ctx, slog.New(slog.NewJSONHandler(&buf, nil)))
		}
		cfg, err := AWS(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if !withLog {
			if _, ok := cfg.Logger.(sdkLog); ok {
				t.Fatal("without a logger in the context, the SDK's own logger")
			}
			continue
		}
		if _, err := dynamodb.NewFromConfig(cfg).ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
			t.Fatal(err)
		}
		var rec struct{ Level, Msg, Component string }
		first, _, _ := bytes.Cut(buf.Bytes(), []byte("\n"))
		if err := json.Unmarshal(first, &rec); err != nil {
			t.Fatalf("%v: %q", err, buf.String())
		}
		if rec.Level != "WARN" || rec.Component != "aws-sdk" || !strings.Contains(rec.Msg, "Date header") {
			t.Errorf("logged %q, want a WARN record of component aws-sdk about the Date header", buf.String())
		}
	}
}
