package assemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go/logging"

	"github.com/ratewarden/ratewarden/internal/sdkhttp"
)

// AWS loads the SDK's configuration the standard way (environment, shared
// files, credential chain, AWS_ENDPOINT_URL and the service variants), with
// a region required; region overrides it when set. When ctx carries a
// logger (WithLog), the SDK's own messages (a warning about a connection
// it could not reuse, say) go to it, as the command's other logs do,
// rather than to stderr in the SDK's own format.
func AWS(ctx context.Context, region string) (aws.Config, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if region != "" {
		opts = append(opts, awsconfig.WithRegion(region))
	}
	if log, ok := ctx.Value(logKey{}).(*slog.Logger); ok {
		opts = append(opts, awsconfig.WithLogger(sdkLog{log}))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return cfg, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return cfg, errors.New("load AWS configuration: no region: set AWS_REGION, a profile's region, or --region")
	}
	cfg.HTTPClient = sdkhttp.New() // see the package: a lost answer, a record written twice
	return cfg, nil
}

type logKey struct{}

// WithLog returns ctx carrying log, to which AWS sends the SDK's messages.
func WithLog(ctx context.Context, log *slog.Logger) context.Context {
	return context.WithValue(ctx, logKey{}, log)
}

// sdkLog is a logging.Logger (the SDK's) writing to a slog.Logger, at
// the message's level, with component=aws-sdk.
type sdkLog struct{ log *slog.Logger }

func (l sdkLog) Logf(c logging.Classification, format string, v ...any) {
	level := slog.LevelInfo
	switch c {
	case logging.Warn:
		level = slog.LevelWarn
	case logging.Debug:
		level = slog.LevelDebug
	}
	l.log.Log(context.Background(), level, fmt.Sprintf(format, v...), "component", "aws-sdk")
}
