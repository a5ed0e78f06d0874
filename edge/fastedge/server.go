package fastedge

import (
	"errors"
	"fmt"
	"log/slog"
	"math"

	"github.com/valyala/fasthttp"

	"github.com/ratewarden/ratewarden/config"
)

// NewServer returns the fasthttp server for h with the configuration's
// limits on clients (edge.client): header_timeout to send the request line
// and headers, idle_timeout between requests, headers of at most 64 KiB
// (net/http's MaxHeaderBytes; past it 431). The body cap and the body
// deadline are h's (HeaderReceived), so that a refused body is decided
// and recorded; max_connections and send_timeout are the listener's
// (assemble.Listen). There is no write timeout, so that long downloads and
// streams are not cut off: each write is bounded instead (send_timeout).
// A request the server cannot read is answered by h.ServerError; the
// server's own log lines go to log at debug level, when log is not nil.
func NewServer(c config.Client, h *Handler, log *slog.Logger) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:                      h.Serve,
		HeaderReceived:               h.HeaderReceived,
		ReadTimeout:                  c.HeaderTimeout,
		IdleTimeout:                  c.IdleTimeout,
		ReadBufferSize:               MaxHeaderBytes,
		MaxRequestBodySize:           math.MaxInt,
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		CloseOnShutdown:              true,
		SecureErrorLogMessage:        true,
		Logger:                       debugLogger{log},
		ErrorHandler:                 h.ServerError,
	}
}

// serverError answers a request the server could not read: 431 for
// headers over MaxHeaderBytes, 408 for headers (or a body the server reads
// ahead) that did not come within their time, 400 for anything else it
// cannot parse. The connection is then closed.
func serverError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.As(err, &small):
		ctx.Error("431 Request Header Fields Too Large", fasthttp.StatusRequestHeaderFieldsTooLarge)
	case isTimeout(err):
		ctx.Error("408 Request Timeout", fasthttp.StatusRequestTimeout)
	default:
		ctx.Error("400 Bad Request", fasthttp.StatusBadRequest)
	}
}

// MaxHeaderBytes bounds a request's line and headers, as net/http's
// server's 64 KiB (and its 4 KiB of slack) do.
const MaxHeaderBytes = 64<<10 + 4<<10

type debugLogger struct{ log *slog.Logger }

func (l debugLogger) Printf(format string, args ...any) {
	if l.log != nil {
		l.log.Debug("fasthttp: " + fmt.Sprintf(format, args...))
	}
}
