// Package emf writes CloudWatch Embedded Metric Format documents: JSON log
// lines from which CloudWatch extracts metrics. It builds documents within
// the specification's limits, splits what would exceed them, validates any
// document against the specification, and delivers documents through sinks
// that say what they could not send.
//
// A Document is one EMF document as a plain value: namespace, timestamp,
// dimension sets, properties and metrics, each with its unit, resolution
// and values (optionally as CloudWatch's values and counts). Build one
// without locks and encode it with AppendDocuments, which writes it as one
// or more JSON lines within every limit, byte for byte the same for the
// same Document. A Writer encodes Documents and hands each line to its
// sinks, counting what it built, split and refused, and what each sink
// accepted.
//
// A Logger is the front end for code that puts one value at a time: it
// buffers values, dimensions and properties behind a mutex, and each flush
// turns the buffer into one Document and writes it through its Writer, as
// log/slog's Logger hands records to a Handler. Validate checks any
// document, whoever wrote it.
package emf
