package columnar

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

func logsRecord(t testing.TB, messageType string, messages ...string) []byte {
	t.Helper()
	return decisiontest.LogsRecord(messageType, 1772366430250, messages...)
}

var lambdaLine = decisiontest.LambdaLine

func TestDecodeLogsRecord(t *testing.T) {
	ds := generate(7, 3)
	lines := make([]string, len(ds))
	for i := range ds {
		lines[i] = string(decisions.AppendJSON(nil, &ds[i]))
	}
	cases := []struct {
		name     string
		data     []byte
		want     []decisions.Decision
		bad      int  // log events counted corrupt
		whole    bool // the record is refused whole
		errMatch string
	}{
		{name: "console.log lines with the runtime's prefix", data: logsRecord(t, "DATA_MESSAGE", lambdaLine(lines[0]), lambdaLine(lines[1])), want: ds[:2]},
		{name: "bare lines", data: logsRecord(t, "DATA_MESSAGE", lines[2]), want: ds[2:3]},
		{name: "the runtime's JSON log format", data: logsRecord(t, "DATA_MESSAGE", decisiontest.LambdaJSONLine(lines[1]), decisiontest.LambdaJSONLine("not a decision")),
			want: ds[1:2], bad: 1, errMatch: "1 CloudWatch Logs events are not decisions"},
		{name: "control message", data: logsRecord(t, "CONTROL_MESSAGE", "CWL CONTROL MESSAGE: Checking health of destination Kinesis stream."), want: nil},
		{name: "platform lines and errors are counted, decisions kept", data: logsRecord(t, "DATA_MESSAGE",
			"START RequestId: 2f1a Version: 3\n", lambdaLine(lines[0]), lambdaLine(`{"v":2,"kind":"decision","time":"not a time"}`), "END RequestId: 2f1a\n"),
			want: ds[:1], bad: 3, errMatch: "3 CloudWatch Logs events are not decisions"},
		{name: "a time past 2262 and a user id past the edge's cap are counted, decisions kept", data: logsRecord(t, "DATA_MESSAGE",
			lambdaLine(`{"v":2,"kind":"decision","time":"9999-12-31T23:59:59Z","outcome":"allow"}`), lambdaLine(lines[0]),
			lambdaLine(`{"v":2,"kind":"decision","time":"2026-11-30T03:00:00Z","outcome":"allow","user_id":"`+strings.Repeat("u", 400_000)+`"}`)),
			want: ds[:1], bad: 2, errMatch: "2 CloudWatch Logs events are not decisions"},
		{name: "unknown message type", data: logsRecord(t, "OTHER", lines[0]), whole: true, errMatch: `message type "OTHER"`},
		{name: "gzip of something else", data: gzipOf(t, []byte("not json")), whole: true, errMatch: "cloudwatch logs record"},
		{name: "truncated gzip", data: logsRecord(t, "DATA_MESSAGE", lines[0])[:20], whole: true, errMatch: "cloudwatch logs record"},
		{name: "decompresses past the bound", data: gzipOf(t, bytes.Repeat([]byte(" "), maxLogsRecord+10)), whole: true, errMatch: "decompressed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := DecodeRecord(c.data, nil)
			bad, partial := IsCorruptEvents(err)
			switch {
			case c.errMatch == "" && err != nil:
				t.Fatalf("error %v", err)
			case c.errMatch != "" && (err == nil || !strings.Contains(err.Error(), c.errMatch)):
				t.Fatalf("error %v, want one with %q", err, c.errMatch)
			case c.whole && (partial || len(got) != 0):
				t.Fatalf("partial %v with %d events; want the record refused whole", partial, len(got))
			case bad != c.bad:
				t.Fatalf("%d corrupt events, want %d", bad, c.bad)
			}
			if len(got) != len(c.want) {
				t.Fatalf("%d events, want %d", len(got), len(c.want))
			}
			for i := range got {
				if g, w := decisions.AppendJSON(nil, &got[i]), decisions.AppendJSON(nil, &c.want[i]); !bytes.Equal(g, w) {
					t.Errorf("event %d:\n got %s\nwant %s", i, g, w)
				}
			}
		})
	}
}

func gzipOf(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}
