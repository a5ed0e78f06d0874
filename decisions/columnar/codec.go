package columnar

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/ratewarden/ratewarden/decisions"
)

// Codec says how a payload of decision events is encoded. It is the byte
// each record of the decision log stores (seglog.Record.Codec) and the
// first byte of each Kinesis record's data; every reader of either decodes
// through DecodePayload or DecodeRecord, so that a codec added here is
// read everywhere.
type Codec uint8

const (
	// CodecArrow is an Arrow IPC stream as Encoder writes it, in any
	// Compression: Decode tells them apart by their first bytes.
	CodecArrow Codec = 1
	// CodecJSON is JSON lines of decisions.AppendJSON: one event a line,
	// the last line's newline optional (a Kinesis record holds one event
	// and no newline).
	CodecJSON Codec = 2
)

// CodecChoices are the names UnmarshalText accepts, the default first.
var CodecChoices = []string{"arrow", "json"}

// UnmarshalText reads a codec by its configuration name, arrow or json.
func (c *Codec) UnmarshalText(b []byte) error {
	switch string(b) {
	case "arrow":
		*c = CodecArrow
	case "json":
		*c = CodecJSON
	default:
		return fmt.Errorf("codec %q: want one of arrow, json", b)
	}
	return nil
}

// Choices lists the names UnmarshalText accepts.
func (Codec) Choices() []string { return CodecChoices }

// String returns "arrow", "json" or the number of an unknown codec.
func (c Codec) String() string {
	switch c {
	case CodecArrow:
		return "arrow"
	case CodecJSON:
		return "json"
	}
	return "codec " + strconv.Itoa(int(c))
}

// DecodePayload appends the events of payload, encoded with c, to dst and
// returns the extended slice. On error it returns dst unchanged and says
// what was wrong: an unknown codec, an empty payload, or Decode's or
// decisions.ParseJSON's error (the first bad line's).
func (d *Decoder) DecodePayload(c Codec, payload []byte, dst []decisions.Decision) ([]decisions.Decision, error) {
	switch c {
	case CodecArrow:
		return d.Decode(payload, dst)
	case CodecJSON:
		if len(payload) == 0 {
			return dst, errors.New("empty JSON payload")
		}
		n := len(dst)
		for line := range bytes.Lines(payload) {
			ev, _, err := decisions.ParseJSON(bytes.TrimSuffix(line, []byte("\n")))
			if err != nil {
				return dst[:n], err
			}
			dst = append(dst, ev)
		}
		return dst, nil
	}
	return dst, fmt.Errorf("unknown codec %d", uint8(c))
}

// DecodeRecord appends the events of data, a payload after its Codec byte
// (the data of a Kinesis record), to dst and returns the extended slice.
// Errors are DecodePayload's, and "empty" for data without a codec byte,
// each prefixed "decode record: ".
//
// A CloudWatch Logs subscription record (gzip, see cwlogs.go) is read too:
// its log events that are decision lines are appended, a control message
// yields none, and log events that are not decisions are skipped and
// reported by a *CorruptEventsError beside the events decoded.
func (d *Decoder) DecodeRecord(data []byte, dst []decisions.Decision) ([]decisions.Decision, error) {
	if len(data) == 0 {
		return dst, errors.New("decode record: empty")
	}
	if isLogsRecord(data) {
		out, err := d.decodeLogs(data, dst)
		if err != nil {
			return out, fmt.Errorf("decode record: %w", err)
		}
		return out, nil
	}
	out, err := d.DecodePayload(Codec(data[0]), data[1:], dst)
	if err != nil {
		return out, fmt.Errorf("decode record: %w", err)
	}
	return out, nil
}

// DecodeRecord decodes one record with a new Decoder; reuse a Decoder to
// decode many.
func DecodeRecord(data []byte, dst []decisions.Decision) ([]decisions.Decision, error) {
	return NewDecoder().DecodeRecord(data, dst)
}
