package aggregator

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// TestRunLines: JSON lines with two corrupt ones roll up into the same
// partials as the decisions themselves; the corrupt lines are skipped,
// counted and named.
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
	dir := t.TempDir()
	st, err := RunLines(context.Background(), &in, Options{Window: time.Second}, []Sink{&PartialsDir{Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped != 2 || len(st.First) != 2 || st.First[0].Line != 11 || st.First[1].Line != 2002 {
		t.Fatalf("skipped %d: %+v", st.Skipped, st.First)
	}
	if e, _ := totals(t, dir, time.Second); e != uint64(len(ds)) {
		t.Fatalf("partials hold %d events, want %d", e, len(ds))
	}
}
