package assemble

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
)

// AWS loads the SDK's configuration the standard way (environment, shared
// files, credential chain, AWS_ENDPOINT_URL and the service variants), with
// a region required; region overrides it when set.
func AWS(ctx context.Context, region string) (aws.Config, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if region != "" {
		opts = append(opts, awsconfig.WithRegion(region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return cfg, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return cfg, errors.New("load AWS configuration: no region: set AWS_REGION, a profile's region, or --region")
	}
	return cfg, nil
}
