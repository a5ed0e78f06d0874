package emf

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A fault says what is wrong with a name or value and what is allowed
// instead. The zero fault means nothing is wrong.
type fault struct {
	problem string
	allowed string
}

func (f fault) ok() bool { return f.problem == "" }

const (
	allowedNamespace = "1 to 255 printable ASCII characters, not only spaces, not starting with ':' or \"AWS/\" (reserved for AWS services)"
	allowedDimName   = "1 to 250 printable ASCII characters, not only spaces, not starting with ':'"
	allowedDimValue  = "1 to 1024 printable ASCII characters, not only spaces"
	allowedMetric    = "1 to 1024 UTF-8 characters, not only spaces"
	allowedValue     = "a finite number between -1.174271e+108 and 1.174271e+108, and 0 or at least 8.515920e-109 in magnitude"
)

// CheckNamespace reports, as an *InvalidError, what is wrong with ns as a
// CloudWatch namespace, or nil: CloudWatch (PutMetricData, and the
// metrics it extracts from EMF) takes 1 to 255 printable ASCII characters,
// not only spaces, not starting with ':', and refuses those starting with
// "AWS/", which it keeps for AWS services. It is the rule every document
// is held to; a command checks its --namespace flag with it, so that a
// namespace CloudWatch would refuse is refused at the start, not in every
// document.
func CheckNamespace(ns string) error {
	if f := checkNamespace(ns); !f.ok() {
		return &InvalidError{"namespace", ns, f.problem, f.allowed}
	}
	return nil
}

// checkNamespace applies the CloudWatch Namespace rules, those of
// PutMetricData, "AWS/" reserved among them: the official client
// libraries' A-Z a-z 0-9 . _ - / # :
// refuses namespaces CloudWatch takes (a space), and their 256 characters
// one it does not.
func checkNamespace(s string) fault {
	if f := checkName(s, MaxNamespaceLen, allowedNamespace); !f.ok() {
		return f
	}
	if strings.HasPrefix(s, reservedNamespace) {
		return fault{"starts with " + strconv.Quote(reservedNamespace) + ", which CloudWatch keeps for AWS services", allowedNamespace}
	}
	return fault{}
}

// reservedNamespace begins the namespaces of AWS services, which
// PutMetricData refuses to any other caller.
const reservedNamespace = "AWS/"

// checkDimensionName applies the CloudWatch Dimension rules to a key.
func checkDimensionName(s string) fault {
	return checkName(s, MaxDimensionNameLen, allowedDimName)
}

// checkName applies the rules CloudWatch shares for namespaces and
// dimension keys: 1 to max printable ASCII characters, not only spaces,
// not starting with ':'.
func checkName(s string, max int, allowed string) fault {
	if f := checkPrintableASCII(s, max, allowed); !f.ok() {
		return f
	}
	if s[0] == ':' {
		return fault{"starts with ':'", allowed}
	}
	return fault{}
}

// checkDimensionValue applies the CloudWatch Dimension rules to a value.
func checkDimensionValue(s string) fault {
	return checkPrintableASCII(s, MaxDimensionValueLen, allowedDimValue)
}

func checkPrintableASCII(s string, max int, allowed string) fault {
	if s == "" {
		return fault{"is empty", allowed}
	}
	if len(s) > max {
		return fault{"is " + strconv.Itoa(len(s)) + " characters long", allowed}
	}
	blank := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f {
			return fault{"contains " + quoteChar(s, i), allowed}
		}
		if c != ' ' {
			blank = false
		}
	}
	if blank {
		return fault{"has only spaces", allowed}
	}
	return fault{}
}

// checkMetricName applies the official client libraries' rules.
func checkMetricName(s string) fault {
	if strings.TrimSpace(s) == "" {
		return fault{"is empty or only white space", allowedMetric}
	}
	if !utf8.ValidString(s) {
		return fault{"is not valid UTF-8", allowedMetric}
	}
	if n := utf8.RuneCountInString(s); n > MaxMetricNameLen {
		return fault{"is " + strconv.Itoa(n) + " characters long", allowedMetric}
	}
	return fault{}
}

// checkMetricValue applies the MetricDatum value range.
func checkMetricValue(v float64) fault {
	switch {
	case math.IsNaN(v):
		return fault{"is NaN", allowedValue}
	case math.IsInf(v, 0):
		return fault{"is infinite", allowedValue}
	}
	a := math.Abs(v)
	if a > maxMetricValue || a != 0 && a < minMetricMagnitude {
		return fault{"is " + strconv.FormatFloat(v, 'g', -1, 64) + ", out of range", allowedValue}
	}
	return fault{}
}

// quoteChar names the character at s[i] for a message.
func quoteChar(s string, i int) string {
	r, _ := utf8.DecodeRuneInString(s[i:])
	return strconv.QuoteRuneToASCII(r) + " at byte " + strconv.Itoa(i)
}

// appendFloat appends v as a JSON number, as encoding/json formats it;
// whole numbers take a faster path. v must be finite.
func appendFloat(dst []byte, v float64) []byte {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		if v == 0 {
			return append(dst, '0') // also for -0
		}
		return strconv.AppendInt(dst, int64(v), 10)
	}
	a := math.Abs(v)
	format := byte('f')
	if a < 1e-6 || a >= 1e21 {
		format = 'e'
	}
	n := len(dst)
	dst = strconv.AppendFloat(dst, v, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		m := len(dst)
		if m-n >= 4 && dst[m-4] == 'e' && dst[m-3] == '-' && dst[m-2] == '0' {
			dst[m-2] = dst[m-1]
			dst = dst[:m-1]
		}
	}
	return dst
}
