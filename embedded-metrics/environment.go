package emf

import "strconv"

// EnvironmentKind names where the process runs. It selects the default
// dimensions and properties of a Logger; it is chosen by configuration and
// never detected by probing. It is a plain value, safe for concurrent use.
type EnvironmentKind string

// The supported environments.
const (
	Local  EnvironmentKind = "local"
	Lambda EnvironmentKind = "lambda"
	ECS    EnvironmentKind = "ecs"
	EC2    EnvironmentKind = "ec2"
)

// Valid reports whether k is one of the supported environments.
func (k EnvironmentKind) Valid() bool {
	switch k {
	case Local, Lambda, ECS, EC2:
		return true
	}
	return false
}

// Environment is what a Logger knows about where it runs. It is resolved
// once, in New, from configuration and environment variables; nothing on a
// hot path reads the environment.
// An Environment is a plain value, safe for concurrent use.
type Environment struct {
	Kind        EnvironmentKind
	ServiceName string      // default dimension ServiceName
	ServiceType string      // default dimension ServiceType
	LogGroup    string      // default dimension LogGroup
	Properties  []Dimension // properties added to every document, such as a Lambda function's version
}

// unknownService is the service name when neither configuration nor the
// environment gives one, as in the official client libraries.
const unknownService = "Unknown"

// ResolveEnvironment builds the Environment of kind from cfg, reading
// environment variables through getenv (Lambda's AWS_LAMBDA_* variables).
// Non-empty ServiceName, ServiceType and LogGroup in cfg win over what the
// environment says.
func ResolveEnvironment(cfg Config, getenv func(string) string) Environment {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	kind := cfg.Environment
	if kind == "" {
		kind = Local
	}
	env := Environment{Kind: kind}
	switch kind {
	case Lambda:
		env.ServiceName = getenv("AWS_LAMBDA_FUNCTION_NAME")
		env.ServiceType = "AWS::Lambda::Function"
		env.LogGroup = getenv("AWS_LAMBDA_LOG_GROUP_NAME")
		if env.LogGroup == "" {
			env.LogGroup = env.ServiceName
		}
		for _, p := range [...]struct{ key, env string }{
			{"executionEnvironment", "AWS_EXECUTION_ENV"},
			{"memorySize", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE"},
			{"functionVersion", "AWS_LAMBDA_FUNCTION_VERSION"},
			{"logStreamId", "AWS_LAMBDA_LOG_STREAM_NAME"},
		} {
			if v := getenv(p.env); v != "" {
				env.Properties = append(env.Properties, Dimension{Name: p.key, Value: v})
			}
		}
	case ECS:
		env.ServiceType = "AWS::ECS::Container"
	case EC2:
		env.ServiceType = "AWS::EC2::Instance"
	default:
		env.ServiceType = "Local"
	}
	if cfg.ServiceName != "" {
		env.ServiceName = cfg.ServiceName
	}
	if env.ServiceName == "" {
		env.ServiceName = unknownService
	}
	if cfg.ServiceType != "" {
		env.ServiceType = cfg.ServiceType
	}
	if cfg.LogGroup != "" {
		env.LogGroup = cfg.LogGroup
	}
	if env.LogGroup == "" {
		env.LogGroup = env.ServiceName + "-metrics"
	}
	return env
}

// defaultDimensions are the dimensions every dimension set starts with,
// in the official libraries' order.
func (e Environment) defaultDimensions() []Dimension {
	return []Dimension{
		{Name: "LogGroup", Value: e.LogGroup},
		{Name: "ServiceName", Value: e.ServiceName},
		{Name: "ServiceType", Value: e.ServiceType},
	}
}

// String describes e for messages.
func (e Environment) String() string {
	return string(e.Kind) + " service " + strconv.Quote(e.ServiceName) + " (" + e.ServiceType + ") log group " + strconv.Quote(e.LogGroup)
}
