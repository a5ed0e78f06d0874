package assemble

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"

	emf "github.com/ratewarden/ratewarden/embedded-metrics"
)

// EMFSinkSpecs is the help text of an EMF sink specification.
const EMFSinkSpecs = "stdout | file:PATH | agent:tcp://HOST:PORT | agent:udp://HOST:PORT | logs:GROUP | metrics"

// emfSinkWaits reports whether the EMF sink spec names waits for a
// delivery, and so has a flush timeout: the CloudWatch agent's, Logs' and
// PutMetricData's.
func emfSinkWaits(spec string) bool {
	kind, arg, _ := strings.Cut(spec, ":")
	return (kind == "agent" || kind == "logs") && arg != "" || spec == "metrics"
}

// checkEMFSpec checks the form of an --emf spec, as EMFSink reads it,
// without opening the sink.
func checkEMFSpec(spec string) error {
	kind, arg, _ := strings.Cut(spec, ":")
	if spec == "stdout" || spec == "metrics" || (kind == "file" || kind == "agent" || kind == "logs") && arg != "" {
		return nil
	}
	return fmt.Errorf("--emf %q: want %s", spec, EMFSinkSpecs)
}

// EMFSink opens the EMF sink spec names: stdout (w), a file (rotated at 64
// MiB), the CloudWatch agent, CloudWatch Logs PutLogEvents into GROUP (a
// stream per host and process, created when missing), or PutMetricData.
// The AWS sinks take the SDK's configuration the standard way. timeout is
// the FlushTimeout of the agent's and the AWS sinks, 0 for their own
// default; stdout and a file do not wait for anyone and ignore it.
func EMFSink(ctx context.Context, spec string, w io.Writer, timeout time.Duration) (emf.Sink, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch {
	case spec == "stdout":
		return emf.NewStdoutSink(w), nil
	case kind == "file" && arg != "":
		return emf.NewFileSink(emf.FileConfig{Path: arg})
	case kind == "agent" && arg != "":
		return emf.NewAgentSink(emf.AgentOptions{Address: arg, FlushTimeout: timeout})
	case kind == "logs" && arg != "":
		acfg, err := AWS(ctx, "")
		if err != nil {
			return nil, fmt.Errorf("emf sink %s: %w", spec, err)
		}
		host, _ := os.Hostname()
		return emf.NewLogsSink(cloudwatchlogs.NewFromConfig(acfg), emf.LogsOptions{LogGroup: arg,
			LogStream: "ratewarden-" + host + "-" + strconv.Itoa(os.Getpid()), Create: true, FlushTimeout: timeout})
	case spec == "metrics":
		acfg, err := AWS(ctx, "")
		if err != nil {
			return nil, fmt.Errorf("emf sink %s: %w", spec, err)
		}
		return emf.NewMetricDataSink(cloudwatch.NewFromConfig(acfg), emf.MetricDataOptions{FlushTimeout: timeout})
	}
	return nil, fmt.Errorf("emf sink %q: want %s", spec, EMFSinkSpecs)
}
