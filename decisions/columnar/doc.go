// Package columnar encodes batches of decision events as Apache Arrow
// record batches, for the decision log and the pipeline that ships it
// (Kinesis bills by the byte, and consumers decode every event), and
// writes them as Parquet files for Athena and DuckDB.
//
// # Encoded batches
//
// An encoded batch is a self-describing Arrow IPC stream: the schema, one
// dictionary batch per dictionary column, one record batch, and the
// end-of-stream marker. Any Arrow IPC reader (pyarrow, arrow-rs, DuckDB's
// arrow extension) reads it. Buffers are compressed with Arrow's own body
// compression (zstd by default, or LZ4 frames, or none), or the whole
// stream is one zstd frame (ZstdStream), or one zstd frame compressed
// against a dictionary of typical streams (ZstdDict; `zstd -D` with the
// dictionary, or this package, turns it back into the Arrow stream). The
// schema, dictionaries and framing are about 8 KB a batch whatever its
// size: under body compression batches should hold thousands of events,
// while under ZstdDict they cost a few hundred bytes, so that a batch of
// 20 events is already about 7 times smaller than its JSON lines, and even a
// batch of one is smaller (BENCHMARKS.md, TestDictionaryTargets). The
// decision log and the Kinesis sink write ZstdDict below PerBufferFrom
// events a record and Zstd from it (SizedEncoder).
//
// The columns, in order, with the Decision field each holds:
//
//	kind              uint8                  Kind
//	time_delta_ns     int64, nullable        Time: nanoseconds since the previous row's time; the
//	                                         first row's since the record batch's time base (below).
//	                                         Null for the zero time.
//	request_id        utf8                   RequestID
//	node              dictionary<utf8>       Node
//	client_ip         fixed_size_binary(16)  ClientIP, as 16 bytes (IPv4 addresses IPv4-mapped)
//	client_ip_family  uint8                  ClientIP: 0 for the zero Addr, 4 for IPv4, 6 for IPv6
//	                                         (an IPv4-mapped IPv6 address stays 6)
//	client_ip_zone    dictionary<utf8>       ClientIP's IPv6 zone, usually empty
//	user_id           utf8                   UserID
//	plan              dictionary<utf8>       Plan
//	tier              dictionary<utf8>       Tier
//	identity_source   dictionary<utf8>       IdentitySource
//	method            dictionary<utf8>       Method
//	host              dictionary<utf8>       Host
//	path              dictionary<utf8>       Path
//	rule              dictionary<utf8>       Rule
//	algorithm         dictionary<utf8>       Algorithm
//	limit             int64                  Limit
//	window_ns         int64                  Window, in nanoseconds
//	count             int64                  Count
//	remaining         int64                  Remaining
//	reset_ns          int64                  Reset, in nanoseconds
//	outcome           uint8                  Outcome
//	reason            dictionary<utf8>       Reason
//	store_latency_ns  int64                  StoreLatency, in nanoseconds
//	privacy           dictionary<utf8>       Privacy
//	list              dictionary<utf8>       List
//	action            dictionary<utf8>       Action
//	target            utf8                   Target
//	ttl_ns            int64                  TTL, in nanoseconds
//	dropped           uint64                 Dropped
//	status            int64                  Status (schema version 2)
//	upstream_latency_ns int64                UpstreamLatency, in nanoseconds (version 2)
//	response_error    dictionary<utf8>       ResponseError (version 2)
//
// Types are chosen per batch: each integer column takes the narrowest
// type of its signedness that holds the batch's values (int8 to int64,
// uint8 to uint64), and each dictionary the narrowest index type for its
// size (int8 up to 128 values, int16 up to 32,768, else int32). Narrow
// columns are smaller uncompressed and decompress faster; the one
// exception is time_delta_ns under zstd, kept int64 because zstd
// compresses the int64 deltas better than their int32 form. [Schema]
// returns the widest form; readers accept any width.
//
// The schema metadata holds:
//
//	ratewarden.schema_version  decisions.Version of the writer: see "Versions" below
//	ratewarden.layout          the layout version, Layout
//	ratewarden.crc32c          the batch's checksum: see "Integrity" below
//
// and each record batch's custom metadata (Arrow IPC Message
// custom_metadata) holds ratewarden.time_base_ns, the time the first delta
// is from, in decimal nanoseconds since 1970: the first event's time.
// Deltas of events a few hundred microseconds apart fit in int32, which
// halves the column uncompressed and under LZ4 (4.0 bytes an event against
// 8.0 for absolute times). Under zstd they do not help: zstd finds the
// upper bytes that absolute times share with the previous one by itself
// (3.3 bytes an event for int64 deltas, 3.1 for absolute times, 4.0 for
// int32 deltas). TestTimeEncodings measures it.
//
// # What comes back
//
// Every field round-trips exactly, with these exceptions, which are the
// JSON codec's too:
//   - times come back in UTC (the same instant; compare with time.Time.Equal
//     or decisiontest.Equal), without a monotonic clock reading;
//   - each byte of a string that is not part of valid UTF-8 comes back as
//     U+FFFD, because Arrow's utf8 type promises valid UTF-8 to every reader.
//
// Times must lie between 1677-09-21 and 2262-04-11 (int64 nanoseconds since
// 1970), or be the zero time, which is stored as null; Encode refuses
// other times. Kinds and outcomes this package does not know (from a newer
// writer) are kept as their numbers.
//
// # Versions
//
// Columns are only ever added, as fields are (docs/decisions.md). A batch
// whose ratewarden.schema_version is newer than decisions.Version is
// decoded: its known columns are read and the others skipped, and
// Decoder.Version reports the version. A column added in version v may be
// missing from a batch of an older version; it then decodes as the zero
// value. A batch whose ratewarden.layout is newer than Layout (a change in
// how fields are stored, which old readers cannot follow) is refused with
// an error wrapping ErrNewerLayout.
//
// # Integrity
//
// Arrow IPC has no checksum, and a flipped bit in an uncompressed or LZ4
// buffer would decode silently to a wrong value. So the schema metadata
// carries the CRC-32C of the whole stream, computed with the checksum's
// own eight characters replaced by '#', and Decode checks it before it
// parses anything: a truncated or corrupted batch is refused with an error
// that says so. A stream without the checksum (another writer's) is
// decoded unchecked, but for the checksums its zstd frames carry, which
// are checked; in a sealed stream they are not read, the CRC-32C covering
// the compressed bytes already.
//
// # Decoding
//
// The Decoder reads the streams this package writes with a reader of its
// own, the hot path of the pipeline's consumers: it parses the framing and
// flatbuffers in place, keeps uncompressed buffers where they are,
// decompresses into a reused arena with one reused zstd decoder, reuses the
// parsed schema when the next batch has the same one, reads dictionary
// indices directly and interns small dictionaries' strings across batches,
// and fills the events column by column. Other valid Arrow streams of the
// same columns (big-endian, dictionary deltas, columns of types it does
// not step over) go through arrow-go's reader. Corrupt input never makes
// Decode panic: every offset is checked, and panics raised by arrow-go are
// recovered and returned as errors.
//
// A consumer that reads a few columns need not have events made at all:
// Decoder.DecodeColumns hands it each record batch's Columns as decoded
// (dictionary indices and dictionaries, addresses as 16-byte rows, integers
// at their stored width, times as deltas), valid until the Decoder decodes
// again. The aggregator's rollups read batches that way. A consumer that
// reads fewer columns still (a report, a count by tier and outcome) names
// them in a ColumnSet and calls Decoder.DecodeColumnSet: under body
// compression the buffers of the other columns are not even decompressed;
// a batch compressed as one frame (ZstdStream, ZstdDict) is decompressed
// whole whatever the set.
//
// # Codecs
//
// A record of the decision log and a Kinesis record each carry a Codec:
// CodecArrow (a batch as above) or CodecJSON (decisions.AppendJSON lines).
// Every reader decodes them here, with Decoder.DecodePayload for a log
// record's payload and Decoder.DecodeRecord (or DecodeRecord) for a Kinesis
// record's data, the codec byte first, so that the log reader, the
// Kinesis source, Scan, the Lambda handler and the decisions commands read
// the same framings.
//
// # Parquet
//
// WriteParquet writes events for SQL engines rather than for round trips:
// kind and outcome as their names (as in the JSON lines), time both as a
// microsecond timestamp in UTC (which Athena, Spark and DuckDB read) and
// as time_ns (int64, exact), client_ip as text, durations as int64
// nanoseconds, dropped as int64, strings as Parquet strings with Parquet's
// own dictionary encoding, all zstd-compressed. [ParquetSchema] returns
// its schema.
package columnar
