package assemble

import (
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/aggregator"
)

// TestPartialsSpec: dir:PATH and dynamodb:TABLE open their stores; every
// other spec, including table names DynamoDB refuses, is an error that
// names the allowed forms.
func TestPartialsSpec(t *testing.T) {
	// A fixed region and test keys; never the machine's profiles.
	for k, v := range map[string]string{"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
		"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_PROFILE": ""} {
		t.Setenv(k, v)
	}
	good := func(spec string, want func(PartialsStore) bool) {
		t.Helper()
		s, err := Partials(t.Context(), spec)
		if err != nil || !want(s) {
			t.Errorf("Partials(%q) = %#v, %v", spec, s, err)
		}
	}
	good("dir:/var/lib/p", func(s PartialsStore) bool { d, ok := s.(*aggregator.PartialsDir); return ok && d.Dir == "/var/lib/p" })
	good("dir:rel:with:colons", func(s PartialsStore) bool {
		d, ok := s.(*aggregator.PartialsDir)
		return ok && d.Dir == "rel:with:colons"
	})
	good("dynamodb:ratewarden-partials", func(s PartialsStore) bool {
		tb, ok := s.(*aggregator.PartialsTable)
		return ok && tb.Table == "ratewarden-partials" && tb.API != nil
	})
	good("dynamodb:a.b_c-1", func(s PartialsStore) bool {
		tb, ok := s.(*aggregator.PartialsTable)
		return ok && tb.Table == "a.b_c-1"
	})
	for _, spec := range []string{"", "dir:", "dir", "/var/lib/p", "dynamodb:", "dynamodb:ab", "dynamodb:a/b/c",
		"dynamodb:a b c", "dynamodb:t:x", "dynamodb:" + strings.Repeat("t", 256), "s3:bucket", "DIR:/x", "dynamodb:tábla"} {
		_, err := Partials(t.Context(), spec)
		if err == nil || !strings.Contains(err.Error(), "want dir:PATH or dynamodb:TABLE") {
			t.Errorf("Partials(%q): %v, want an error naming the forms", spec, err)
		}
	}
}
