package aggregator

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// TestRunLines: JSON lines with corrupt ones roll up into the same
// partials as the decisions themselves; the corrupt lines (not JSON, a bad
// time, a time past 2262 that would wrap into 1816, a user id of 400 KB)
// are skipped, counted and named.
func TestRunLines(t *testing.T) {
	ds := decisiontest.NewGenerator(13, t0).Batch(2000)
	var in bytes.Buffer
	for i := range ds {
		if i == 10 {
			in.WriteString("{not json\n")
		}
		in.Write(decisions.AppendJSON(nil, &ds[i]))
		in.WriteByte('\n')
	}
	in.WriteString(`{"v":1,"time":"yesterday"}` + "\n")
	in.WriteString(`{"v":2,"time":"9999-12-31T23:59:59Z","outcome":"allow"}` + "\n")
	in.WriteString(`{"v":2,"time":"2026-12-01T03:00:00Z","outcome":"allow","user_id":"` + strings.Repeat("u", 400<<10) + `"}` + "\n")
	dir := t.TempDir()
	st, err := RunLines(context.Background(), &in, Options{Window: time.Second}, []Sink{&PartialsDir{Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped != 4 || len(st.First) != 4 || st.First[0].Line != 11 || st.First[1].Line != 2002 ||
		st.First[2].Line != 2003 || st.First[3].Line != 2004 {
		t.Fatalf("skipped %d: %+v", st.Skipped, st.First)
	}
	if e, _ := totals(t, dir, time.Second); e != uint64(len(ds)) {
		t.Fatalf("partials hold %d events, want %d", e, len(ds))
	}
}
