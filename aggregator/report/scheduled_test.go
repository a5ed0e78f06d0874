package report

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
)

// TestScheduledEvent invokes the scheduled report through Lambda's own
// handler adapter with a recorded EventBridge scheduled event: the range is
// the eleven minutes before the event's time less two windows, and the
// report written to stdout and to the file is the golden one.
func TestScheduledEvent(t *testing.T) {
	dir := storePartials(t, fixedEvents())
	damage(t, dir, t0.Add(4*time.Minute))
	var out bytes.Buffer
	file := filepath.Join(t.TempDir(), "report.md")
	s := &Scheduled{
		Job: Job{PartialsDir: dir, AlertsFile: filepath.Join("testdata", "alerts.jsonl"), Format: Markdown,
			Options: Options{Source: "partials dir:testdata", Top: 5, TopK: 20, Points: 12}},
		Range: 11 * time.Minute, Out: &out, OutFile: file,
	}
	ev, err := os.ReadFile(filepath.Join("testdata", "scheduled-event.json"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := lambda.NewHandler(s.Handle).Invoke(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	var res ScheduledResult
	if err := json.Unmarshal(resp, &res); err != nil {
		t.Fatal(err)
	}
	if !res.From.Equal(t0) || !res.To.Equal(t0.Add(11*time.Minute)) || res.Windows != 11 || res.WindowsRead != 10 || res.Complete || res.Unreadable != 1 {
		t.Errorf("result %+v", res)
	}
	want, _ := os.ReadFile(filepath.Join("testdata", "report.md"))
	got, _ := os.ReadFile(file)
	if !bytes.Equal(out.Bytes(), want) || !bytes.Equal(got, want) || res.Bytes != len(want) {
		t.Errorf("the scheduled report differs from testdata/report.md:\n%s", out.String())
	}
}

// TestScheduledRefusesOtherEvents: an event that is not a schedule's does
// not start a report.
func TestScheduledRefusesOtherEvents(t *testing.T) {
	s := &Scheduled{Job: Job{PartialsDir: t.TempDir()}}
	for _, ev := range []string{
		`{"Records":[{"kinesis":{"data":"e30="}}]}`,
		`{"detail-type":"Scheduled Event","source":"my.app","time":"2026-03-02T10:13:00Z"}`,
		`{"detail-type":"Scheduled Event","source":"aws.events"}`,
	} {
		_, err := lambda.NewHandler(s.Handle).Invoke(context.Background(), []byte(ev))
		if err == nil || !strings.Contains(err.Error(), "Scheduled Event") {
			t.Errorf("%s: %v", ev, err)
		}
	}
}
