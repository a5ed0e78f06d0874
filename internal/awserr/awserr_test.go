package awserr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
)

func TestIsThrottle(t *testing.T) {
	api := func(code string) error { return &smithy.GenericAPIError{Code: code, Fault: smithy.FaultServer} }
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"kinesis throughput", api("ProvisionedThroughputExceededException"), true},
		{"throttling", api("Throttling"), true},
		{"throttling exception", api("ThrottlingException"), true},
		{"request limit", api("RequestLimitExceeded"), true},
		{"wrapped", fmt.Errorf("put records: %w", api("ThrottlingException")), true},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", api("SlowDown"))), true},
		{"server fault", api("InternalFailure"), false},
		{"missing stream", api("ResourceNotFoundException"), false},
		{"kms throttling is not the SDK's", api("KMSThrottlingException"), false},
		{"no code", api(""), false},
		{"not an API error", errors.New("Throttling"), false},
		{"deadline", context.DeadlineExceeded, false},
		{"nil", nil, false},
	}
	for _, c := range cases {
		if got := IsThrottle(c.err); got != c.want {
			t.Errorf("%s: IsThrottle(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// TestIsThrottleCodeIsTheSDKs: every code in the SDK's list counts, and
// nothing else.
func TestIsThrottleCodeIsTheSDKs(t *testing.T) {
	for code := range retry.DefaultThrottleErrorCodes {
		if !IsThrottleCode(code) {
			t.Errorf("IsThrottleCode(%q) = false, want true", code)
		}
	}
	for _, code := range []string{"", "throttling", "ValidationException", "InternalError"} {
		if IsThrottleCode(code) {
			t.Errorf("IsThrottleCode(%q) = true, want false", code)
		}
	}
}
