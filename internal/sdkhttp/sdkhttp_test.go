package sdkhttp

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// sdkBody returns a request body as the SDK builds it for a payload, and
// closes it, as the SDK does once the response headers came.
func sdkBody(t *testing.T) io.ReadCloser {
	t.Helper()
	req := smithyhttp.NewStackRequest().(*smithyhttp.Request)
	req, err := req.SetStream(bytes.NewReader([]byte(`{"StreamName":"s"}`)))
	if err != nil {
		t.Fatal(err)
	}
	hr := req.Build(context.Background())
	hr.Body.Close()
	return hr.Body
}

// TestClosedBodyEndsCleanly: what the transport does after sending a
// body, io.Copy the rest of it, fails with io.EOF on the SDK's body once
// the SDK closed it (which the transport takes for a failed write, and
// closes the connection), and ends cleanly through Client.
func TestClosedBodyEndsCleanly(t *testing.T) {
	if _, err := io.Copy(io.Discard, sdkBody(t)); err != io.EOF {
		t.Fatalf("the SDK's closed body: io.Copy error %v; the test no longer shows the SDK's behaviour", err)
	}
	var sent io.ReadCloser
	c := Client{Inner: doer(func(r *http.Request) (*http.Response, error) {
		sent = r.Body
		return nil, nil
	})}
	r, err := http.NewRequest("POST", "http://127.0.0.1:1/", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Body = sdkBody(t)
	c.Do(r)
	if n, err := io.Copy(io.Discard, sent); err != nil || n != 0 {
		t.Fatalf("through Client: io.Copy read %d bytes, error %v; want 0, nil", n, err)
	}
}

type doer func(*http.Request) (*http.Response, error)

func (d doer) Do(r *http.Request) (*http.Response, error) { return d(r) }
