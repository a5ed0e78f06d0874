package aggregator

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
)

// TestCloseFrame: bytes appended between openFrame and closeFrame are
// framed exactly as appendBytes frames them, at every length where the
// length's uvarint takes another byte.
func TestCloseFrame(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 129, 16383, 16384, 1<<21 - 1, 1 << 21} {
		data := bytes.Repeat([]byte{0xa5, 0x5a, 0x01}, n/3+1)[:n]
		prefix := []byte("before")
		b, at := openFrame(bytes.Clone(prefix))
		got := closeFrame(append(b, data...), at)
		if want := appendBytes(bytes.Clone(prefix), data); !bytes.Equal(got, want) {
			t.Errorf("%d bytes: framed to %d bytes, appendBytes to %d", n, len(got), len(want))
		}
	}
}

// TestAppendAddr: appendAddr writes what appendBytes of MarshalBinary
// wrote, for every kind of address, a zone an attacker made long
// included.
func TestAppendAddr(t *testing.T) {
	for _, a := range []netip.Addr{{}, netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("::ffff:203.0.113.7"),
		netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("fe80::1%eth0"),
		netip.MustParseAddr("fe80::1%" + strings.Repeat("z", 300))} {
		m, err := a.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := appendAddr([]byte{1}, a), appendBytes([]byte{1}, m); !bytes.Equal(got, want) {
			t.Errorf("%v: %x, want %x", a, got, want)
		}
	}
}

// TestTopKEncodingOrder: a TopK's encoding and Top list its clients in
// the order of sortHitters (count, then client) where the sort keys do
// not tell clients apart: user ids alike in their first 7 bytes, an
// address with and without a zone, an address and its prefixes, equal
// counts. The encoding is
// compared with one built from sortHitters' order, as the encoding was
// built before it ordered the counters in scratch.
func TestTopKEncodingOrder(t *testing.T) {
	clients := []Client{{User: "abcdefgZ"}, {User: "abcdefg"}, {User: "abcdefg\x00"}, {User: "abcdefgA"}, {User: "b"},
		{Addr: netip.MustParseAddr("fe80::1%b")}, {Addr: netip.MustParseAddr("fe80::1")}, {Addr: netip.MustParseAddr("fe80::1%a")},
		{Addr: netip.MustParseAddr("fe80::2")}, {Addr: netip.MustParseAddr("10.0.0.1")}, {Addr: netip.MustParseAddr("::ffff:10.0.0.1")}, {},
		{Addr: netip.MustParseAddr("fe80::"), Bits: 64}, {Addr: netip.MustParseAddr("fe80::"), Bits: 10}, {Addr: netip.MustParseAddr("fe80::")}}
	tk := NewTopK(len(clients))
	for i, c := range clients {
		tk.Add(c, uint64(1+i%3)) // three counts, each shared by several clients
	}
	var order []ranked
	for range 2 { // the scratch reused holds nothing of the last encoding
		got := tk.appendBinary([]byte{7}, &order, false)
		if want := refTopKEncoding([]byte{7}, tk); !bytes.Equal(got, want) {
			t.Fatalf("encoding differs from sortHitters' order:\n got %x\nwant %x", got, want)
		}
	}
	want := make([]Hitter, tk.Len())
	for p := range want {
		want[p] = tk.hitter(p)
	}
	sortHitters(want)
	for n := range len(want) + 2 {
		got := tk.Top(n)
		if len(got) != min(n, len(want)) {
			t.Fatalf("Top(%d) holds %d", n, len(got))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("Top(%d)[%d] = %+v, want %+v", n, i, got[i], want[i])
			}
		}
	}
}

// refTopKEncoding is t's encoding as it was written from a sorted
// copy of its hitters and each address's MarshalBinary.
func refTopKEncoding(b []byte, t *TopK) []byte {
	hs := make([]Hitter, t.Len())
	for p := range hs {
		hs[p] = t.hitter(p)
	}
	sortHitters(hs)
	b = appendUvarint(b, uint64(t.k))
	b = appendUvarint(b, uint64(len(hs)))
	for _, h := range hs {
		b = appendString(b, h.Client.User)
		a, _ := h.Client.Addr.MarshalBinary()
		b = appendBytes(b, a)
		b = append(b, h.Client.Bits)
		b = appendUvarint(b, h.Count)
		b = appendUvarint(b, h.Err)
	}
	return b
}
