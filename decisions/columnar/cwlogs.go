package columnar

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/ratewarden/ratewarden/decisions"
)

// CloudWatch Logs subscription records. A subscription filter that
// delivers a log group to a Kinesis stream writes each record as the gzip
// of a JSON envelope,
//
//	{"messageType": "DATA_MESSAGE", "owner": "...", "logGroup": "...",
//	 "logStream": "...", "subscriptionFilters": [...],
//	 "logEvents": [{"id": "...", "timestamp": 1700000000000, "message": "..."}]}
//
// or, once, a CONTROL_MESSAGE that checks the destination is reachable.
// Decisions reach a stream that way from the viewer-request function at
// CloudFront's edge, which writes each decision as one line with
// console.log. Lambda's Node.js runtime prefixes the line with
// "<timestamp>\t<request id>\tINFO\t" in the text log format, and wraps it
// as the "message" of {"timestamp", "level", "requestId", "message"} in the
// JSON log format; a line written to stdout directly arrives bare. All
// three are read. DecodeRecord reads such records beside ratewarden's own:
// their first byte, gzip's 0x1f, is no Codec.

// maxLogsRecord bounds the decompressed size of a CloudWatch Logs record:
// CloudWatch Logs sends at most 1 MiB of log events in one, so more is a
// record that is not one.
const maxLogsRecord = 8 << 20

const gzipMagic0, gzipMagic1 = 0x1f, 0x8b

// isLogsRecord reports whether data is gzip, as CloudWatch Logs writes
// its subscription records.
func isLogsRecord(data []byte) bool {
	return len(data) >= 2 && data[0] == gzipMagic0 && data[1] == gzipMagic1
}

// CorruptEventsError says that some log events of a CloudWatch Logs record
// were not decisions: DecodeRecord skipped them and decoded the others. A
// reader counts Bad events as corrupt and keeps the events decoded.
type CorruptEventsError struct {
	Bad   int   // log events skipped
	First error // why the first was
}

func (e *CorruptEventsError) Error() string {
	return strconv.Itoa(e.Bad) + " CloudWatch Logs events are not decisions; the first: " + e.First.Error()
}

type logsEnvelope struct {
	MessageType string `json:"messageType"`
	LogEvents   []struct {
		ID        string `json:"id"`
		Timestamp int64  `json:"timestamp"`
		Message   string `json:"message"`
	} `json:"logEvents"`
}

// decodeLogs appends the decisions of a CloudWatch Logs record to dst. A
// control message holds none. A record that is not such an envelope is an
// error and adds nothing; log events that are not decisions are skipped
// and reported by a *CorruptEventsError.
func (d *Decoder) decodeLogs(data []byte, dst []decisions.Decision) ([]decisions.Decision, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return dst, fmt.Errorf("cloudwatch logs record: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxLogsRecord+1))
	if err != nil {
		return dst, fmt.Errorf("cloudwatch logs record: %w", err)
	}
	if len(raw) > maxLogsRecord {
		return dst, fmt.Errorf("cloudwatch logs record: more than %d bytes decompressed", maxLogsRecord)
	}
	var env logsEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return dst, fmt.Errorf("cloudwatch logs record: %w", err)
	}
	switch env.MessageType {
	case "CONTROL_MESSAGE":
		return dst, nil
	case "DATA_MESSAGE":
	default:
		return dst, fmt.Errorf("cloudwatch logs record: message type %q: want DATA_MESSAGE or CONTROL_MESSAGE", env.MessageType)
	}
	var bad *CorruptEventsError
	for i := range env.LogEvents {
		ev, err := logDecision(env.LogEvents[i].Message)
		if err != nil {
			if bad == nil {
				bad = &CorruptEventsError{First: fmt.Errorf("log event %s: %w", env.LogEvents[i].ID, err)}
			}
			bad.Bad++
			continue
		}
		dst = append(dst, ev)
	}
	if bad != nil {
		return dst, bad
	}
	return dst, nil
}

// logLine returns the JSON of a log event's message: the message itself,
// or what follows the "<timestamp>\t<request id>\t<level>\t" that Lambda's
// Node.js runtime puts before a console.log line, without the newline.
func logLine(msg string) []byte {
	b := bytes.TrimRight([]byte(msg), "\r\n")
	if len(b) > 0 && b[0] == '{' {
		return b
	}
	rest := b
	for range 3 {
		i := bytes.IndexByte(rest, '\t')
		if i < 0 {
			return b
		}
		rest = rest[i+1:]
	}
	return rest
}

// logDecision reads the decision a log event's message holds, in any of
// the three forms.
func logDecision(msg string) (decisions.Decision, error) {
	line := logLine(msg)
	ev, _, err := decisions.ParseJSON(line)
	if err == nil {
		return ev, nil
	}
	var wrapped struct {
		Level   string  `json:"level"`
		Message *string `json:"message"`
	}
	if json.Unmarshal(line, &wrapped) != nil || wrapped.Message == nil || wrapped.Level == "" {
		return ev, err
	}
	ev, _, err = decisions.ParseJSON(logLine(*wrapped.Message))
	return ev, err
}

// IsCorruptEvents reports whether err says that only some events of a
// record were skipped, and how many.
func IsCorruptEvents(err error) (int, bool) {
	var ce *CorruptEventsError
	if errors.As(err, &ce) {
		return ce.Bad, true
	}
	return 0, false
}
