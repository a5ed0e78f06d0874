package assemble

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"slices"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/dynamostore"
	"github.com/ratewarden/ratewarden/edge/redisstore"
	"github.com/ratewarden/ratewarden/edge/syncstore"
)

// Store opens the distributed counter store store.type names, behind the
// over-limit cache and batched counting of store.sync, exactly as every
// command runs it. For the memory store it returns nil: the limiter makes
// its own. close closes the stack, flushing what the cache batched.
func Store(ctx context.Context, cfg *config.Config, log *slog.Logger, getenv func(string) string) (edge.Store, func(context.Context) error, error) {
	var (
		backend syncstore.Backend
		closeFn = func(context.Context) error { return nil }
	)
	s := &cfg.Store
	switch s.Type {
	case "memory":
		return nil, nil, nil
	case "dynamodb":
		acfg, err := AWS(ctx, s.DynamoDB.Region)
		if err != nil {
			return nil, nil, fmt.Errorf("store.dynamodb: %w", err)
		}
		client := dynamodb.NewFromConfig(acfg, func(o *dynamodb.Options) {
			if s.DynamoDB.Endpoint != "" {
				o.BaseEndpoint = &s.DynamoDB.Endpoint
			}
		})
		st, err := dynamostore.New(dynamostore.Options{Client: client, Table: s.DynamoDB.Table, Region: acfg.Region,
			ReadAfterConditionFailure: s.DynamoDB.ReadAfterConditionFailure, Lease: s.DynamoDB.ConcurrencyLease})
		if err != nil {
			return nil, nil, fmt.Errorf("store.dynamodb: %w", err)
		}
		backend = st
		log.Info("counting in DynamoDB", "table", s.DynamoDB.Table, "region", acfg.Region)
	case "redis":
		// go-redis logs every failed dial while Redis is down, to stderr
		// unless told otherwise: through the command's log, rate-limited.
		redis.SetLogger(redisstore.NewLogger(log, redisstore.DefaultLogEvery))
		r := s.Redis
		opts := &redis.UniversalOptions{Addrs: r.Addrs, Username: r.Username, Password: getenv(r.PasswordEnv), DB: r.DB,
			PoolSize: r.PoolSize, ContextTimeoutEnabled: true}
		if r.TLS {
			opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		client := redis.NewUniversalClient(opts)
		var rc redisstore.Client = client
		closeFn = func(context.Context) error { return client.Close() }
		if r.Batch {
			b := redisstore.NewBatcher(client, redisstore.BatcherOptions{})
			rc = b
			closeFn = func(context.Context) error { b.Close(); return client.Close() }
		}
		st, err := redisstore.New(redisstore.Options{Client: rc, Prefix: r.Prefix, Clock: r.Clock})
		if err != nil {
			closeFn(ctx)
			return nil, nil, fmt.Errorf("store.redis: %w", err)
		}
		backend = st
		log.Info("counting in Redis", "addrs", r.Addrs, "clock", r.Clock)
	default:
		return nil, nil, fmt.Errorf("store.type: %q is not a store", s.Type)
	}
	exact := slices.Clone(s.Sync.Exact)
	ss, err := syncstore.New(syncstore.Options{Store: backend, MaxError: s.Sync.MaxError, Nodes: s.EdgeNodes,
		FlushInterval: s.Sync.FlushInterval, MaxKeys: s.Sync.MaxKeys,
		Exact: func(rule string) bool { return slices.Contains(exact, rule) }})
	if err != nil {
		closeFn(ctx)
		return nil, nil, fmt.Errorf("store.sync: %w", err)
	}
	return ss, func(ctx context.Context) error {
		err := ss.Close(ctx)
		if cerr := closeFn(ctx); err == nil {
			err = cerr
		}
		return err
	}, nil
}
