package decisions

import (
	"strings"
	"testing"
	"time"
)

func TestCheckUserID(t *testing.T) {
	for id, want := range map[string]string{
		"alice":                  "",
		"a b":                    "",
		"José García":            "",
		"\u202enimda":            "", // printable to the lists; reports show it plainly
		"\ufeffbom":              "",
		strings.Repeat("ü", 128): "",
		"":                       "empty",
		strings.Repeat("u", 257): "257 bytes",
		"alice\xff":              "not valid UTF-8",
		"ali\x00ce":              "control character at byte 4",
		"alice\x7f":              "control character",
		"alice\u0085":            "control character",
		"alice\ufffd":            "control character",
		"alice\n":                "control character",
		" alice":                 "white space",
		"alice ":                 "white space",
		"\u00a0alice":            "white space",
		"alice\u3000":            "white space",
		"alice\u2028":            "white space",
	} {
		err := CheckUserID(id)
		if (err == nil) != (want == "") || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("CheckUserID(%q) = %v, want %q", id, err, want)
		}
	}
}

// BenchmarkCheckUserID is what believing a user id costs the edge per
// authenticated request (identity.Believes), by the id's length.
func BenchmarkCheckUserID(b *testing.B) {
	for _, c := range []struct{ name, id string }{
		{"5B", "alice"},
		{"uuid-36B", "0b7c5e1e-7f5a-4c1e-9a53-2f1d8e6b4c21"},
		{"utf8-64B", strings.Repeat("ü", 32)},
		{"max-256B", strings.Repeat("u", 256)},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if CheckUserID(c.id) != nil {
					b.Fatal("refused")
				}
			}
		})
	}
}

// TestFits: the emitter's quick test agrees with FieldCaps and Check: a
// decision with any capped field one byte over its cap, a time just past
// either end, or a drop count over MaxDropped does not fit; at the caps
// and ends it does.
func TestFits(t *testing.T) {
	base := Decision{Time: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)}
	for _, f := range FieldCaps {
		d := base
		*f.Of(&d) = strings.Repeat("x", f.Max)
		if !d.fits() || d.Check() != nil {
			t.Errorf("%s of %d bytes: fits %v, Check %v; want it to fit", f.Name, f.Max, d.fits(), d.Check())
		}
		*f.Of(&d) += "x"
		if d.fits() || d.Check() == nil {
			t.Errorf("%s of %d bytes fits, want not", f.Name, f.Max+1)
		}
		// A byte that is not UTF-8 is read as U+FFFD, three bytes.
		*f.Of(&d) = strings.Repeat("\xff", f.Max/3)
		if !d.fits() || d.Check() != nil {
			t.Errorf("%s of %d bytes not UTF-8: fits %v, Check %v; want it to fit", f.Name, f.Max/3, d.fits(), d.Check())
		}
		*f.Of(&d) += "\xff"
		if d.fits() || d.Check() == nil || !d.Clamp() || !d.fits() || d.Check() != nil {
			t.Errorf("%s of %d bytes not UTF-8 fits, or does not once clamped", f.Name, f.Max/3+1)
		}
	}
	for _, c := range []struct {
		tm   time.Time
		want bool
	}{
		{time.Time{}, true}, {MinTime, true}, {MaxTime, true},
		{MinTime.Add(-time.Nanosecond), false}, {MaxTime.Add(time.Nanosecond), false},
	} {
		d := base
		d.Time = c.tm
		// fits may say no at the ends themselves (seconds compared), where
		// Clamp then finds nothing to change.
		if d.fits() && !c.want || (d.Check() == nil) != c.want || d.Clamp() == c.want {
			t.Errorf("time %v: fits %v, Check %v, clamped %v; want it within %v", c.tm, d.fits(), d.Check(), !c.want, c.want)
		}
	}
	d := base
	d.Dropped = MaxDropped + 1
	if d.fits() {
		t.Errorf("dropped %d fits", d.Dropped)
	}
}

func TestCut(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"edge", 8, "edge"},
		{"edge", 2, "ed"},
		{"añb", 2, "a"}, // ñ is two bytes: not split
		{"añb", 3, "añ"},
	} {
		if got := Cut(c.in, c.n); got != c.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
