// Package seglog provides the local decision log: an append-only, segmented
// log of opaque records, each carrying a batch of events. It is the source
// of truth of the product (every rollup, report and alert can be rebuilt by
// replaying it), so it is written to survive crashes, to read past corrupt
// regions losing only them, and never to panic on any input.
//
// The log knows nothing of a payload's encoding: a [Record] holds bytes, the
// id of the codec that wrote them, the number of events they hold and the
// range of their event times. Each event has an offset; a record's events
// take the offsets FirstOffset … FirstOffset+Count-1, and offsets are
// contiguous across records and segments.
//
// One process writes a log directory at a time ([Open] takes a lock);
// any number of readers, in that process ([Log.Reader]) or in others
// ([OpenReader]), read it at the same time.
//
// # Durability
//
// [Log.Append] writes its records with one write call. Under
// [SyncEveryBatch] it returns once they are on stable storage (appends from
// several goroutines share a sync). Under [SyncInterval] (the default, every
// 10 ms) and [SyncNever] it returns once they are written;
// [Log.Durable] tells which offsets are synced, so a caller can acknowledge
// events exactly when they are safe. A crash of the process alone loses
// nothing that Append returned; a crash of the machine loses at most what
// was appended after the last sync. A crash can leave the prefix of a batch
// whose Append had not returned.
//
// # Files
//
// A log directory holds:
//
//	<20-digit first offset>.seg   segments, in offset order
//	offsets/<consumer>.off       consumer offsets
//	LOCK                         locked by the writing process, which writes its pid there
//	quarantine/                  files named like segments that are not ([QuarantineDir])
//
// Names are zero-padded so that their lexical and numeric orders agree.
// Files of other names are ignored. A file named like a segment that does
// not start with a segment header is a stranger's, and its name says
// nothing about offsets: readers report it (as [ErrNotSegment], losing no
// events) and read on, and [Open] moves it to quarantine/, reporting where. New segments and offset files are
// written under a temporary name, synced and renamed, so they appear whole.
//
// # Segment format, version 1
//
// All integers are little-endian. A segment starts with a 28-byte header:
//
//	magic     [5]byte  "RWSEG"
//	version   u8       1
//	reserved  u16      0
//	first     u64      offset of the segment's first event (also its name)
//	created   i64      when the segment was created, Unix ns (for the age roll)
//	crc       u32      CRC-32C (Castagnoli) of the 24 bytes before it
//
// Frames follow, back to back:
//
//	marker    [4]byte  A7 3F C1 5B, to find the next frame after a corrupt one
//	length    u32      length of the body, at most 64 MiB
//	crc       u32      CRC-32C of the body
//	body      [length]byte
//
// The first byte of a body gives its type and version. A record (type 1):
//
//	type      u8       1
//	codec     u8       the payload's codec, opaque to the log (1 Arrow+zstd, 2 JSON lines, …)
//	first     u64      offset of the record's first event
//	count     u32      events in the payload, at least 1
//	min time  i64      earliest event time, Unix ns; math.MinInt64 for no time
//	max time  i64      latest event time, likewise; min ≤ max
//	payload   [length-30]byte
//
// When the writer rolls to a new segment it closes the old one with a
// trailer (type 2), which lets an opening writer index a sealed segment, and
// a reader seek in it, without reading it through:
//
//	type      u8       2
//	reserved  u8       0
//	first     u64      the segment's first offset
//	end       u64      one past the segment's last offset: the next segment's first
//	records   u64      records in the segment
//	min time  i64      earliest event time of the segment (as above)
//	max time  i64      latest event time of the segment
//	entries   u32      n, then n index entries of 24 bytes, in file order:
//	  offset  u64      first offset of a record
//	  pos     i64      byte position of that record's frame
//	  maxPrev i64      latest event time of the records before it in the segment
//	frame len u32      length of the whole trailer frame, so it can be found from the file's end
//
// A segment without a trailer is the active one, or one whose writer died:
// it is read through.
//
// # Reading corrupt data
//
// A frame is valid when its marker, length, CRC and type are right, its
// count is at least 1, its times are ordered, and its first offset is not
// below the one the previous record implies (nor past the next segment's
// first). A reader meeting an invalid frame scans forward for the next
// marker that starts a valid frame, and reports the region it skipped as a
// [Problem] (with the events lost, from the offset gap); a corrupt record
// loses only itself. At the end of the last segment an invalid region
// followed by nothing valid is a torn tail (a write cut short by a crash):
// readers treat it as the end of the data, and the writer truncates it when
// it opens the log. A segment that is empty, is not a segment (bad magic) or
// is of a future version is reported and skipped; the others are read.
// Events are reported lost between segments only where both files have a
// segment header.
//
// # Compatibility
//
// A reader rejects a segment header of a version newer than its own, and
// reports a frame of an unknown type as an unreadable region. Format changes
// either add a body type (old readers skip such frames and report them) or
// raise the header version.
package seglog
