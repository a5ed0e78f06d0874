package columnar

import (
	"strconv"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/ratewarden/ratewarden/decisions"
)

// Schema metadata keys.
const (
	// KeySchemaVersion holds decisions.Version of the writer, in decimal.
	// It counts added fields: a reader decodes a newer version's known
	// columns and ignores the others.
	KeySchemaVersion = "ratewarden.schema_version"
	// KeyLayout holds the major version of the columnar layout (how fields
	// are stored: time deltas, address families). It changes only in ways
	// a reader cannot follow; a reader refuses a newer one.
	KeyLayout = "ratewarden.layout"
	// KeyChecksum holds the CRC-32C of the whole encoded batch, computed
	// with the checksum's own eight characters replaced by '#', in eight
	// upper-case hex digits.
	KeyChecksum = "ratewarden.crc32c"
	// KeyTimeBase, in the custom metadata of each record batch (not of the
	// schema), holds the time its first delta is from, in nanoseconds
	// since 1970, in decimal.
	KeyTimeBase = "ratewarden.time_base_ns"
)

// Layout is the major version of the columnar layout written by this
// package.
const Layout = 1

// Address families in the client_ip_family column.
const (
	familyNone = 0 // the zero netip.Addr
	family4    = 4 // an IPv4 address, stored IPv4-mapped
	family6    = 6 // an IPv6 address, including IPv4-mapped ones
)

// colType is how a column is stored.
type colType uint8

const (
	tUint8  colType = iota // uint8
	tInt                   // int8, int16, int32 or int64: the narrowest that holds the batch's values
	tUint                  // uint8, uint16, uint32 or uint64, likewise
	tTime                  // tInt, nullable: nanoseconds since the previous non-null row
	tString                // utf8
	tDict                  // dictionary<int8|int16|int32, utf8>
	tAddr                  // fixed_size_binary(16)
)

// The columns, in schema order.
const (
	cKind = iota
	cTime
	cRequestID
	cNode
	cClientIP
	cClientIPFamily
	cClientIPZone
	cUserID
	cPlan
	cTier
	cIdentitySource
	cMethod
	cHost
	cPath
	cRule
	cAlgorithm
	cLimit
	cWindow
	cCount
	cRemaining
	cReset
	cOutcome
	cReason
	cStoreLatency
	cPrivacy
	cList
	cAction
	cTarget
	cTTL
	cDropped
	cStatus
	cUpstreamLatency
	cResponseError
	numCols
)

// column describes one column: its name, how it is stored, and the
// schema version that added it (a batch of an older version may lack it,
// and the field then decodes as its zero value).
type column struct {
	name  string
	typ   colType
	since int
}

var columns = [numCols]column{
	cKind:           {"kind", tUint8, 1},
	cTime:           {"time_delta_ns", tTime, 1},
	cRequestID:      {"request_id", tString, 1},
	cNode:           {"node", tDict, 1},
	cClientIP:       {"client_ip", tAddr, 1},
	cClientIPFamily: {"client_ip_family", tUint8, 1},
	cClientIPZone:   {"client_ip_zone", tDict, 1},
	cUserID:         {"user_id", tString, 1},
	cPlan:           {"plan", tDict, 1},
	cTier:           {"tier", tDict, 1},
	cIdentitySource: {"identity_source", tDict, 1},
	cMethod:         {"method", tDict, 1},
	cHost:           {"host", tDict, 1},
	cPath:           {"path", tDict, 1},
	cRule:           {"rule", tDict, 1},
	cAlgorithm:      {"algorithm", tDict, 1},
	cLimit:          {"limit", tInt, 1},
	cWindow:         {"window_ns", tInt, 1},
	cCount:          {"count", tInt, 1},
	cRemaining:      {"remaining", tInt, 1},
	cReset:          {"reset_ns", tInt, 1},
	cOutcome:        {"outcome", tUint8, 1},
	cReason:         {"reason", tDict, 1},
	cStoreLatency:   {"store_latency_ns", tInt, 1},
	cPrivacy:        {"privacy", tDict, 1},
	cList:           {"list", tDict, 1},
	cAction:         {"action", tDict, 1},
	cTarget:         {"target", tString, 1},
	cTTL:            {"ttl_ns", tInt, 1},
	cDropped:        {"dropped", tUint, 1},
	// Version 2: what happened after the decision.
	cStatus:          {"status", tInt, 2},
	cUpstreamLatency: {"upstream_latency_ns", tInt, 2},
	cResponseError:   {"response_error", tDict, 2},
}

// sized are the columns whose type is chosen per batch (dictionaries and
// integers), in schema order; each takes two bits of a schema key.
var sized = func() []int {
	var out []int
	for i, c := range columns {
		switch c.typ {
		case tDict, tInt, tUint, tTime:
			out = append(out, i)
		}
	}
	return out
}()

// Width codes: the log2 of a type's size in bytes.
const (
	w8 = iota
	w16
	w32
	w64
)

var (
	addrType  = &arrow.FixedSizeBinaryType{ByteWidth: 16}
	intTypes  = [4]arrow.DataType{arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64}
	uintTypes = [4]arrow.DataType{arrow.PrimitiveTypes.Uint8, arrow.PrimitiveTypes.Uint16, arrow.PrimitiveTypes.Uint32, arrow.PrimitiveTypes.Uint64}
	dictTypes [3]*arrow.DictionaryType // by index width code

	schemaMu    sync.Mutex
	schemaCache = map[uint64]*arrow.Schema{} // under schemaMu; bounded by maxSchemas
)

// maxSchemas bounds the schema cache; a batch with a combination of widths
// beyond it gets a schema of its own.
const maxSchemas = 256

func init() {
	for i := range dictTypes {
		dictTypes[i] = &arrow.DictionaryType{IndexType: intTypes[i], ValueType: arrow.BinaryTypes.String}
	}
}

// arrowType returns the type of a column of type t with width code w.
func arrowType(t colType, w uint64) arrow.DataType {
	switch t {
	case tUint8:
		return arrow.PrimitiveTypes.Uint8
	case tInt, tTime:
		return intTypes[w]
	case tUint:
		return uintTypes[w]
	case tString:
		return arrow.BinaryTypes.String
	case tAddr:
		return addrType
	}
	return dictTypes[min(w, w32)]
}

// widest is the schema key of the widest types: 32-bit dictionary
// indices, 64-bit integers.
var widest = func() uint64 {
	var key uint64
	for k, c := range sized {
		w := uint64(w64)
		if columns[c].typ == tDict {
			w = w32
		}
		key |= w << (2 * k)
	}
	return key
}()

// Schema returns the widest schema of an encoded batch: see the package
// documentation for the columns. Each batch narrows the index type of each
// dictionary and the type of each integer column to what its values need
// (a dictionary of at most 128 values has int8 indices; limits fit in
// int16), so a batch's schema is this one or a narrower one; readers must
// accept any width. In this schema the checksum's value is its
// placeholder. The returned schema is shared and must not be modified.
func Schema() *arrow.Schema { return schemaFor(widest) }

// schemaFor returns the schema whose k-th sized column has width code
// key>>(2*k)&3. Schemas are built once per key and kept: the few keys
// that occur are reused by every batch.
func schemaFor(key uint64) *arrow.Schema {
	schemaMu.Lock()
	defer schemaMu.Unlock()
	if s := schemaCache[key]; s != nil {
		return s
	}
	fields := make([]arrow.Field, numCols)
	k := 0
	for i, c := range columns {
		var w uint64
		if k < len(sized) && sized[k] == i {
			w = key >> (2 * k) & 3
			k++
		}
		fields[i] = arrow.Field{Name: c.name, Type: arrowType(c.typ, w), Nullable: c.typ == tTime}
	}
	md := arrow.NewMetadata(
		[]string{KeySchemaVersion, KeyLayout, KeyChecksum},
		[]string{strconv.Itoa(decisions.Version), strconv.Itoa(Layout), checksumPlaceholder},
	)
	s := arrow.NewSchema(fields, &md)
	if len(schemaCache) < maxSchemas {
		schemaCache[key] = s
	}
	return s
}
