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

// Rows are rows of a payload as DecodeRows hands them over: the Columns of
// an Arrow record batch, or the Events of JSON lines. One of the two is
// set; both are valid until the Decoder decodes again.
type Rows struct {
	Columns *Columns
	Events  []decisions.Decision
}

// Len returns the number of rows.
func (r Rows) Len() int {
	if r.Columns != nil {
		return r.Columns.Len
	}
	return len(r.Events)
}

// DecodeRows decodes payload, encoded with c, for a consumer that reads
// columns where there are columns to read (the aggregator): it calls f
// with the Columns of each record batch of an Arrow stream
// (DecodeColumns), and with the events of JSON lines, decoded as
// DecodePayload does. Decoding errors are DecodePayload's; an error from f
// stops the decoding and is returned as it is. A stream of several record
// batches whose later batch is corrupt has had its earlier batches handed
// to f (the streams this package writes hold one).
func (d *Decoder) DecodeRows(c Codec, payload []byte, f func(Rows) error) error {
	if c == CodecArrow {
		return d.DecodeColumns(payload, func(cols *Columns) error { return f(Rows{Columns: cols}) })
	}
	rows, err := d.DecodePayload(c, payload, d.rows[:0])
	if err != nil {
		return err
	}
	d.rows = rows
	defer clear(rows) // the events' strings are not kept past the call
	return f(Rows{Events: rows})
}

// CountError says that a decision log record's payload holds another
// number of events than the record declares (seglog.Record.Count, from
// which the log's offsets follow): a record written wrong or altered. A
// reader counts the declared events it could not read as lost.
type CountError struct {
	Declared int  // events the record says its payload holds
	Got      int  // events the payload holds, or at least (More)
	More     bool // the payload holds Got events or more
}

func (e *CountError) Error() string {
	more := ""
	if e.More {
		more = " or more"
	}
	return "the payload holds " + strconv.Itoa(e.Got) + " events" + more + " where its record says " + strconv.Itoa(e.Declared)
}

// DecodeCountedPayload is DecodePayload of a payload whose record says it
// holds count events. A payload of more events appends none and returns
// a *CountError, as it does any decoding error; a payload of fewer
// appends them, with a *CountError: they are the record's first events,
// the rest are lost.
func (d *Decoder) DecodeCountedPayload(c Codec, payload []byte, count int, dst []decisions.Decision) ([]decisions.Decision, error) {
	n := len(dst)
	out, err := d.DecodePayload(c, payload, dst)
	switch got := len(out) - n; {
	case err != nil:
		return out[:n], err
	case got > count:
		return out[:n], &CountError{Declared: count, Got: got}
	case got < count:
		return out, &CountError{Declared: count, Got: got}
	}
	return out, nil
}

// DecodeCountedRows is DecodeRows of a payload whose record says it holds
// count events, as DecodeCountedPayload decodes events: rows past the
// count are not handed to f (the record batch that would take the rows
// handed past it, and those after it, are not), and a payload of fewer
// rows is handed over whole; either returns a *CountError.
func (d *Decoder) DecodeCountedRows(c Codec, payload []byte, count int, f func(Rows) error) error {
	handed := 0
	err := d.DecodeRows(c, payload, func(r Rows) error {
		if handed+r.Len() > count {
			// Returned as it is, as an error of f would be.
			return &CountError{Declared: count, Got: handed + r.Len(), More: true}
		}
		handed += r.Len()
		return f(r)
	})
	if err == nil && handed != count {
		err = &CountError{Declared: count, Got: handed}
	}
	return err
}

// DecodeRecordRows is DecodeRows of data, a payload after its Codec byte
// (the data of a Kinesis record). Decoding errors are DecodeRecord's: a
// CloudWatch Logs subscription record hands over its decisions as Events
// and reports the log events that are not decisions by a
// *CorruptEventsError after f has run.
func (d *Decoder) DecodeRecordRows(data []byte, f func(Rows) error) error {
	if len(data) == 0 {
		return errors.New("decode record: empty")
	}
	if isLogsRecord(data) {
		rows, err := d.decodeLogs(data, d.rows[:0])
		d.rows = rows
		defer clear(rows)
		if _, partial := IsCorruptEvents(err); err != nil && !partial {
			return fmt.Errorf("decode record: %w", err)
		}
		if len(rows) > 0 {
			if ferr := f(Rows{Events: rows}); ferr != nil {
				return ferr
			}
		}
		if err != nil {
			return fmt.Errorf("decode record: %w", err)
		}
		return nil
	}
	var ferr error
	err := d.DecodeRows(Codec(data[0]), data[1:], func(r Rows) error {
		ferr = f(r)
		return ferr
	})
	if err != nil && (ferr == nil || err != ferr) {
		return fmt.Errorf("decode record: %w", err)
	}
	return err
}
