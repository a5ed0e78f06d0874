package emf

import "time"

// Unit is a CloudWatch metric unit, as listed for MetricDatum in the
// CloudWatch API reference. The zero value means no unit is written, which
// CloudWatch reads as None. It is a plain value, safe for concurrent use.
type Unit string

// The CloudWatch metric units.
const (
	Seconds            Unit = "Seconds"
	Microseconds       Unit = "Microseconds"
	Milliseconds       Unit = "Milliseconds"
	Bytes              Unit = "Bytes"
	Kilobytes          Unit = "Kilobytes"
	Megabytes          Unit = "Megabytes"
	Gigabytes          Unit = "Gigabytes"
	Terabytes          Unit = "Terabytes"
	Bits               Unit = "Bits"
	Kilobits           Unit = "Kilobits"
	Megabits           Unit = "Megabits"
	Gigabits           Unit = "Gigabits"
	Terabits           Unit = "Terabits"
	Percent            Unit = "Percent"
	Count              Unit = "Count"
	BytesPerSecond     Unit = "Bytes/Second"
	KilobytesPerSecond Unit = "Kilobytes/Second"
	MegabytesPerSecond Unit = "Megabytes/Second"
	GigabytesPerSecond Unit = "Gigabytes/Second"
	TerabytesPerSecond Unit = "Terabytes/Second"
	BitsPerSecond      Unit = "Bits/Second"
	KilobitsPerSecond  Unit = "Kilobits/Second"
	MegabitsPerSecond  Unit = "Megabits/Second"
	GigabitsPerSecond  Unit = "Gigabits/Second"
	TerabitsPerSecond  Unit = "Terabits/Second"
	CountPerSecond     Unit = "Count/Second"
	None               Unit = "None"
)

// units lists every valid unit in the order of the CloudWatch reference.
var units = [...]Unit{
	Seconds, Microseconds, Milliseconds, Bytes, Kilobytes, Megabytes, Gigabytes,
	Terabytes, Bits, Kilobits, Megabits, Gigabits, Terabits, Percent, Count,
	BytesPerSecond, KilobytesPerSecond, MegabytesPerSecond, GigabytesPerSecond,
	TerabytesPerSecond, BitsPerSecond, KilobitsPerSecond, MegabitsPerSecond,
	GigabitsPerSecond, TerabitsPerSecond, CountPerSecond, None,
}

// Valid reports whether u is one of the CloudWatch units. The empty unit is
// valid: it is left out of the document.
func (u Unit) Valid() bool {
	if u == "" {
		return true
	}
	for _, v := range units {
		if u == v {
			return true
		}
	}
	return false
}

// Resolution is a metric's storage resolution: how finely CloudWatch
// stores its values. The zero value means Standard.
// It is a plain value, safe for concurrent use.
type Resolution int

const (
	// High stores values at one-second resolution.
	High Resolution = 1
	// Standard stores values at one-minute resolution; it is the default
	// and is not written to documents.
	Standard Resolution = 60
)

// Valid reports whether r is zero, High or Standard.
func (r Resolution) Valid() bool { return r == 0 || r == High || r == Standard }

// normal maps the zero value to Standard.
func (r Resolution) normal() Resolution {
	if r == 0 {
		return Standard
	}
	return r
}

// ByteSize is a size in bytes. It is a plain value, safe for concurrent use.
type ByteSize int

// Sizes in bytes.
const (
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
)

// Limits of the embedded metric format and of CloudWatch, as stated by the
// specification, the MetricDatum and Dimension references and the official
// client libraries.
const (
	// MaxMetricsPerDirective is the most metric definitions one directive holds.
	MaxMetricsPerDirective = 100
	// MaxDimensionSetKeys is the most keys one dimension set holds.
	MaxDimensionSetKeys = 30
	// MaxValuesPerMetric is the most values one metric member's array holds.
	MaxValuesPerMetric = 100
	// MaxDimensionNameLen is the longest dimension key, in characters.
	MaxDimensionNameLen = 250
	// MaxDimensionValueLen is the longest dimension value, in characters.
	MaxDimensionValueLen = 1024
	// MaxMetricNameLen is the longest metric name, in characters.
	MaxMetricNameLen = 1024
	// MaxNamespaceLen is the longest namespace, in characters
	// (PutMetricData's Namespace).
	MaxNamespaceLen = 255
	// MaxTimestampPast is how far before now a document's timestamp may be.
	MaxTimestampPast = 14 * 24 * time.Hour
	// MaxTimestampFuture is how far after now a document's timestamp may be.
	MaxTimestampFuture = 2 * time.Hour
	// DefaultMaxDocumentSize is the CloudWatch Logs event size the
	// specification states.
	DefaultMaxDocumentSize = 256 * KiB
	// MaxDocumentSize is the largest document size that may be configured:
	// the CloudWatch Logs event limit.
	MaxDocumentSize = 1 * MiB
	// maxMetricValue and minMetricMagnitude bound the values CloudWatch
	// accepts (MetricDatum: 8.515920e-109 to 1.174271e+108).
	maxMetricValue     = 1.174271e+108
	minMetricMagnitude = 8.515920e-109
)
