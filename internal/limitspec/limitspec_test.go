package limitspec_test

import (
	"testing"

	"github.com/ratewarden/ratewarden/internal/limitspec"
)

func TestAlgorithmNames(t *testing.T) {
	for _, name := range limitspec.Algorithms {
		a, ok := limitspec.ParseAlgorithm(name)
		if !ok || a.String() != name {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", name, a, ok)
		}
	}
	for _, name := range []string{"", "unknown", "Fixed_Window"} {
		if a, ok := limitspec.ParseAlgorithm(name); ok {
			t.Errorf("ParseAlgorithm(%q) = %v, want not ok", name, a)
		}
	}
	if got := limitspec.Algorithm(0).String(); got != "unknown" {
		t.Errorf("Algorithm(0).String() = %q", got)
	}
	if got := limitspec.Algorithm(99).String(); got != "unknown" {
		t.Errorf("Algorithm(99).String() = %q", got)
	}
}

func TestClockNames(t *testing.T) {
	for _, name := range limitspec.ServerTime.Choices() {
		var c limitspec.Clock
		if err := c.UnmarshalText([]byte(name)); err != nil || c.String() != name {
			t.Errorf("UnmarshalText(%q) = %v, %v", name, c, err)
		}
	}
	var zero limitspec.Clock
	if zero != limitspec.ServerTime || zero.Choices()[0] != zero.String() {
		t.Errorf("the zero Clock is %v, want the first choice, %q", zero, zero.Choices()[0])
	}
	for _, name := range []string{"", "Server", "local", "caller "} {
		c := limitspec.CallerTime
		if err := c.UnmarshalText([]byte(name)); err == nil || c != limitspec.CallerTime {
			t.Errorf("UnmarshalText(%q) = %v, %v: want an error and the clock unchanged", name, c, err)
		}
	}
	if got := limitspec.Clock(7).String(); got != "unknown" {
		t.Errorf("Clock(7).String() = %q", got)
	}
}
