package decisions

import (
	"strings"
	"testing"
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
