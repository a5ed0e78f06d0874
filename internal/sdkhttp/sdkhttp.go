// Package sdkhttp is the HTTP client every AWS client of the project
// sends through: the SDK's default one, with the body of each request
// read the way net/http expects.
//
// The SDK hands net/http a request body that, once closed, answers a
// WriteTo with io.EOF as an error (smithy-go's safeWriteToReadCloser),
// and it closes the body as soon as the response headers come. The
// transport, having sent the body, reads it once more to make sure it
// ended, through WriteTo when the body has one: if the SDK closed the
// body in between (the service answered fast, the client's goroutines
// were slow), that read fails, the transport takes it for a failed
// write and closes the connection under the response being read. The
// call fails with "deserialization failed ... use of closed network
// connection", on each of the SDK's attempts; a PutRecords whose answer
// is lost so is sent again, and its records are written twice. Client
// hides WriterTo, so the transport reads the body with Read, which ends
// with a plain io.EOF after the close (aws/aws-sdk-go-v2#2737).
//
// A service client given an HTTP client other than the SDK's own leaves
// it as it is: the connect and TLS timeouts of AWS_DEFAULTS_MODE
// (standard, in-region, cross-region, mobile) are not applied to it. The
// default mode, legacy, has none; the project's calls carry deadlines of
// their own.
package sdkhttp

import (
	"io"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// Doer is what the SDK sends requests through (aws.HTTPClient).
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Client sends requests through Inner, their bodies read with Read only.
type Client struct{ Inner Doer }

// New returns a Client over the SDK's default HTTP client.
func New() Client { return Client{Inner: awshttp.NewBuildableClient()} }

// Do sends r through c.Inner.
func (c Client) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = body{r.Body}
	}
	return c.Inner.Do(r)
}

// body is a request body with only Read and Close.
type body struct{ rc io.ReadCloser }

func (b body) Read(p []byte) (int, error) { return b.rc.Read(p) }
func (b body) Close() error               { return b.rc.Close() }
