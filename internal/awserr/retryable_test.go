package awserr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/smithy-go"
)

// wireError makes one Kinesis call to a local server that answers with
// status and, unless code is empty, an AWS JSON error of that code, and
// returns the error the SDK gives back: the chain of wrappers (operation,
// response, API error) the sinks see.
func wireError(t *testing.T, status int, code string) error {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(status)
		if code != "" {
			fmt.Fprintf(w, `{"__type":%q,"message":"answered by the test"}`, code)
		}
	}))
	defer srv.Close()
	_, err := newClient(srv.URL).ListStreams(context.Background(), &kinesis.ListStreamsInput{})
	if err == nil {
		t.Fatalf("status %d %s: the call succeeded", status, code)
	}
	return err
}

func newClient(url string) *kinesis.Client {
	return kinesis.New(kinesis.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(url),
		Credentials:  aws.AnonymousCredentials{},
		Retryer:      aws.NopRetryer{},
	})
}

// TestRetryableOnTheWire classifies the errors the SDK returns for real
// answers of the Kinesis JSON protocol, with and without a caller's own
// codes (which count before the status, and only for that caller).
func TestRetryableOnTheWire(t *testing.T) {
	kms := []string{"KMSThrottlingException", "KMSUnavailableException"}
	cases := []struct {
		status int
		code   string
		codes  []string
		want   bool
	}{
		{400, "ThrottlingException", nil, true},
		{400, "ProvisionedThroughputExceededException", nil, true},
		{400, "RequestLimitExceeded", nil, true},
		{400, "TooManyRequestsException", nil, true},
		{400, "LimitExceededException", nil, true},
		{503, "SlowDown", nil, true},
		{500, "InternalFailure", nil, true},
		{503, "ServiceUnavailable", nil, true},
		{500, "SomethingNew", nil, true},
		{502, "", nil, true},
		{504, "", nil, true},
		{429, "", nil, true},
		{408, "", nil, true},
		{400, "RequestTimeoutException", nil, true},
		{400, "ValidationException", nil, false},
		{400, "InvalidArgumentException", nil, false},
		{400, "ResourceNotFoundException", nil, false},
		{403, "AccessDeniedException", nil, false},
		{403, "", nil, false},
		{404, "", nil, false},
		{413, "", nil, false},
		{400, "KMSThrottlingException", nil, false},
		{400, "KMSThrottlingException", kms, true},
		{400, "KMSUnavailableException", kms, true},
		{400, "KMSAccessDeniedException", kms, false},
		{400, "ValidationException", kms, false},
		{400, "ThrottlingException", kms, true},
	}
	for _, c := range cases {
		err := wireError(t, c.status, c.code)
		if got := Retryable(err, c.codes...); got != c.want {
			t.Errorf("%d %s: Retryable(%v, %q) = %v, want %v", c.status, c.code, err, c.codes, got, c.want)
		}
	}
}

// TestRetryableWithoutAnAnswer: timeouts and transport errors are worth
// another call; a cancelled call is not, whatever wraps the cancellation.
func TestRetryableWithoutAnAnswer(t *testing.T) {
	api := func(code string, fault smithy.ErrorFault) error {
		return &smithy.GenericAPIError{Code: code, Fault: fault}
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, sdkCancelled := newClient("http://127.0.0.1:1").ListStreams(cancelled, &kinesis.ListStreamsInput{})

	// A server that never answers, behind a call with a deadline.
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hang.Close()
	defer close(release) // before Close, which waits for the handler
	short, stop := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer stop()
	_, sdkDeadline := newClient(hang.URL).ListStreams(short, &kinesis.ListStreamsInput{})

	// A port nothing listens on: the dial is refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	_, sdkRefused := newClient(closed).ListStreams(context.Background(), &kinesis.ListStreamsInput{})
	if !errors.Is(sdkCancelled, context.Canceled) || !errors.Is(sdkDeadline, context.DeadlineExceeded) || sdkRefused == nil {
		t.Fatalf("the calls failed with %v; %v; %v: want cancelled, a deadline, an error", sdkCancelled, sdkDeadline, sdkRefused)
	}

	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"cancelled", context.Canceled, false},
		{"cancelled, wrapped", fmt.Errorf("put records: %w", context.Canceled), false},
		{"cancelled by the SDK", sdkCancelled, false},
		{"deadline", context.DeadlineExceeded, true},
		{"deadline by the SDK", sdkDeadline, true},
		{"refused dial", sdkRefused, true},
		{"network timeout", &net.OpError{Op: "read", Net: "tcp", Err: timeoutError{}}, true},
		{"reset", errors.New("connection reset by peer"), true},
		{"server fault, unknown code", api("SomethingNew", smithy.FaultServer), true},
		{"client fault, unknown code", api("SomethingNew", smithy.FaultClient), false},
		{"unknown fault, unknown code", api("SomethingNew", smithy.FaultUnknown), false},
		{"client fault, throttling code", api("ThrottlingException", smithy.FaultClient), true},
		{"request timeout code", api("RequestTimeout", smithy.FaultUnknown), true},
		{"internal error code", api("InternalError", smithy.FaultUnknown), true},
	}
	for _, c := range cases {
		if got := Retryable(c.err); got != c.want {
			t.Errorf("%s: Retryable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
