package emf

import (
	"errors"
	"fmt"
	"strconv"
)

// Config configures a Logger. Fill it, call SetDefaults, then Validate; New
// does both. A Config is a plain value; New copies it.
type Config struct {
	// Namespace is the CloudWatch namespace of every metric; default "ratewarden".
	Namespace string `json:"namespace" yaml:"namespace"`
	// Environment selects the default dimensions: local (default), lambda, ecs or ec2.
	Environment EnvironmentKind `json:"environment" yaml:"environment"`
	// ServiceName, ServiceType and LogGroup override the values the
	// environment gives the default dimensions of the same names.
	ServiceName string `json:"service_name" yaml:"service_name"`
	ServiceType string `json:"service_type" yaml:"service_type"`
	LogGroup    string `json:"log_group" yaml:"log_group"`
	// NoDefaultDimensions leaves LogGroup, ServiceName and ServiceType out
	// of every dimension set.
	NoDefaultDimensions bool `json:"no_default_dimensions" yaml:"no_default_dimensions"`
	// MaxDocumentSize is the largest document written; default 256 KiB,
	// at most 1 MiB. Larger batches are split.
	MaxDocumentSize ByteSize `json:"max_document_size" yaml:"max_document_size"`
	// MaxBufferedValues bounds the metric values held between flushes;
	// default 100000. Values put beyond it are dropped and counted.
	MaxBufferedValues int `json:"max_buffered_values" yaml:"max_buffered_values"`
	// ValidateDocuments runs Validate on every document before it is
	// written and withholds invalid ones. It costs time; tests turn it on.
	ValidateDocuments bool `json:"validate_documents" yaml:"validate_documents"`
}

// Defaults for Config.
const (
	DefaultNamespace         = "ratewarden"
	DefaultMaxBufferedValues = 100000
)

// SetDefaults fills the zero fields of c with their defaults.
func (c *Config) SetDefaults() {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.Environment == "" {
		c.Environment = Local
	}
	if c.MaxDocumentSize == 0 {
		c.MaxDocumentSize = DefaultMaxDocumentSize
	}
	if c.MaxBufferedValues == 0 {
		c.MaxBufferedValues = DefaultMaxBufferedValues
	}
}

// minDocumentSize leaves room for the metadata of a document with many
// dimension keys and one value.
const minDocumentSize = 4 * KiB

// Validate reports every field of c that is out of range, naming the key,
// the value and what is allowed.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, value, allowed string) {
		errs = append(errs, fmt.Errorf("%s: %s is not allowed; use %s", key, value, allowed))
	}
	if f := checkNamespace(c.Namespace); !f.ok() {
		bad("namespace", strconv.Quote(c.Namespace), f.allowed)
	}
	if !c.Environment.Valid() {
		bad("environment", strconv.Quote(string(c.Environment)), "one of local, lambda, ecs, ec2")
	}
	for _, f := range [...]struct{ key, value string }{
		{"service_name", c.ServiceName}, {"service_type", c.ServiceType}, {"log_group", c.LogGroup},
	} {
		if f.value != "" {
			if fl := checkDimensionValue(f.value); !fl.ok() {
				bad(f.key, strconv.Quote(f.value), fl.allowed)
			}
		}
	}
	if c.MaxDocumentSize < minDocumentSize || c.MaxDocumentSize > MaxDocumentSize {
		bad("max_document_size", strconv.Itoa(int(c.MaxDocumentSize)), "4096 to 1048576 bytes")
	}
	if c.MaxBufferedValues < 1 {
		bad("max_buffered_values", strconv.Itoa(c.MaxBufferedValues), "at least 1")
	}
	return errors.Join(errs...)
}
