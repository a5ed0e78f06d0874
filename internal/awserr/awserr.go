// Package awserr classifies the errors the AWS SDK for Go returns, so that
// every client of an AWS service in the project (the Kinesis sink and
// source, the CloudWatch clients) counts and retries the same errors as
// throttling.
package awserr

import (
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
)

// IsThrottle reports whether err is, or wraps, an AWS API error whose code
// is one the SDK's retryer treats as throttling
// (retry.DefaultThrottleErrorCodes: Throttling,
// ProvisionedThroughputExceededException, RequestLimitExceeded and the
// like). It is safe for concurrent use.
func IsThrottle(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && IsThrottleCode(ae.ErrorCode())
}

// IsThrottleCode reports whether an AWS API error code is a throttling
// code, by retry.DefaultThrottleErrorCodes.
func IsThrottleCode(code string) bool {
	_, ok := retry.DefaultThrottleErrorCodes[code]
	return ok
}
