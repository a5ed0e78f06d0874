package decisiontest

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
)

// LogsRecord returns a CloudWatch Logs subscription record as CloudWatch
// Logs puts it on a Kinesis stream: the gzip of its JSON envelope, of
// messageType DATA_MESSAGE or CONTROL_MESSAGE, with one log event per
// message, stamped at unix milliseconds ms.
func LogsRecord(messageType string, ms int64, messages ...string) []byte {
	type logEvent struct {
		ID        string `json:"id"`
		Timestamp int64  `json:"timestamp"`
		Message   string `json:"message"`
	}
	evs := []logEvent{}
	for i, m := range messages {
		evs = append(evs, logEvent{ID: fmt.Sprintf("3719556372149841068%036d", i), Timestamp: ms, Message: m})
	}
	raw, err := json.Marshal(map[string]any{"messageType": messageType, "owner": "123456789012",
		"logGroup": "/aws/lambda/us-east-1.ratewarden-viewer-request", "logStream": "2026/03/01/[1]0123456789abcdef",
		"subscriptionFilters": []string{"ratewarden-decisions"}, "logEvents": evs})
	if err != nil {
		panic(err) // strings and numbers always encode
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(raw)
	zw.Close()
	return b.Bytes()
}

// LambdaLine is a console.log line as Lambda's Node.js runtime writes it
// in the text log format: "<timestamp>\t<request id>\tINFO\t<msg>\n".
func LambdaLine(msg string) string {
	return "2026-03-01T12:00:30.250Z\t2f1a0c3e-6b7d-4c59-9d0e-1a2b3c4d5e6f\tINFO\t" + msg + "\n"
}

// LambdaJSONLine is a console.log line as Lambda's Node.js runtime writes it
// in the JSON log format: an object whose message is the line.
func LambdaJSONLine(msg string) string {
	b, err := json.Marshal(map[string]string{"timestamp": "2026-03-01T12:00:30.250Z", "level": "INFO",
		"requestId": "2f1a0c3e-6b7d-4c59-9d0e-1a2b3c4d5e6f", "message": msg})
	if err != nil {
		panic(err) // strings always encode
	}
	return string(b)
}
