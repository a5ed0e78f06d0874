package assemble

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/config"
)

// PartialsSpecs names the forms of a partials store's spec (--partials).
const PartialsSpecs = "dir:PATH or dynamodb:TABLE"

// PartialsStore is where the aggregator's partials are written and read:
// an *aggregator.PartialsDir or *aggregator.PartialsTable.
type PartialsStore interface {
	aggregator.Sink
	aggregator.PartialsWalker
	Read(ctx context.Context, size time.Duration, from, to time.Time) (map[time.Time]*aggregator.Partial, []aggregator.ReadProblem, error)
}

var (
	_ PartialsStore = (*aggregator.PartialsDir)(nil)
	_ PartialsStore = (*aggregator.PartialsTable)(nil)
)

// Partials opens the partials store spec names: dir:PATH, a directory, or
// dynamodb:TABLE, a table (aws init creates it) reached with the SDK's
// configuration (AWS), so that AWS_ENDPOINT_URL_DYNAMODB and the like
// apply as they do to every other DynamoDB user of the binary.
func Partials(ctx context.Context, spec string) (PartialsStore, error) {
	if err := CheckPartialsSpec(spec); err != nil {
		return nil, err
	}
	kind, arg, _ := strings.Cut(spec, ":")
	if kind == "dir" {
		return &aggregator.PartialsDir{Dir: arg}, nil
	}
	cfg, err := AWS(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("partials %s: %w", spec, err)
	}
	return &aggregator.PartialsTable{API: dynamodb.NewFromConfig(cfg), Table: arg}, nil
}

// CheckPartialsSpec checks the form of a --partials spec, as Partials reads
// it, without opening the store: the commands refuse a bad one as a bad
// flag before they start.
func CheckPartialsSpec(spec string) error {
	kind, arg, _ := strings.Cut(spec, ":")
	if kind == "dir" && arg != "" || kind == "dynamodb" && config.ValidTableName(arg) {
		return nil
	}
	return fmt.Errorf("--partials %q: want %s (a table name is 3 to 255 letters, digits, '_', '-' or '.')", spec, PartialsSpecs)
}
