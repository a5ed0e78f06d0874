// Package awserr classifies the errors the AWS SDK for Go returns, so that
// every client of an AWS service in the project (the Kinesis sink and
// source, the CloudWatch clients) counts the same errors as throttling and
// retries the same failed calls.
package awserr

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
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

// serverFaults are the codes AWS services answer a fault of their own with
// (the common errors InternalFailure and ServiceUnavailable, and the
// spellings CloudWatch and others use); a call that met one may succeed if
// made again.
var serverFaults = map[string]struct{}{
	"InternalFailure":             {},
	"InternalError":               {},
	"InternalServiceError":        {},
	"InternalServiceFault":        {},
	"ServiceUnavailable":          {},
	"ServiceUnavailableException": {},
}

// Retryable reports whether a failed call to an AWS service may succeed if
// made again. A call may succeed again after throttling, a server fault
// (a code above, a 5xx status or an API error of FaultServer), a timeout
// (context.DeadlineExceeded, HTTP 408, the SDK's RequestTimeout codes, a
// network timeout), HTTP 429, or a transport error that carries no answer
// of the service. It will not after a refusal (any other 4xx: a bad
// argument, access denied, a missing resource), nor after its context was
// cancelled: whoever cancelled it has given up. codes names further error
// codes the caller's service documents as retryable; a code is matched
// before the HTTP status, since AWS answers throttling with 400. It is safe
// for concurrent use.
func Retryable(err error, codes ...string) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, context.DeadlineExceeded):
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code := ae.ErrorCode()
		if _, ok := serverFaults[code]; ok || IsThrottleCode(code) {
			return true
		}
		if _, ok := retry.DefaultRetryableErrorCodes[code]; ok {
			return true
		}
		for _, c := range codes {
			if c == code {
				return true
			}
		}
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		if status := re.HTTPStatusCode(); status >= 500 || status == 408 || status == 429 {
			return true
		} else if status >= 400 {
			return false
		}
	}
	if ae != nil {
		return ae.ErrorFault() == smithy.FaultServer
	}
	// An error with no API code and no refusal is a network or transport
	// error (a reset connection, a refused dial, a truncated answer).
	return true
}
