package decisions

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"net/netip"
)

// Privacy modes for client addresses and user ids.
const (
	Keep     = "keep"     // as seen
	Truncate = "truncate" // addresses only: IPv4 to its /24, IPv6 to its /48
	HMAC     = "hmac"     // replaced by a keyed HMAC-SHA256 pseudonym
)

// Privacy is a deployment's treatment of personal data in the decision log:
// how client addresses and user ids are recorded. It is applied when events
// are written, off the request path, and recorded in every event it
// touched (Decision.Privacy), keep/keep included, so a reader knows what an
// address means; "" means a writer that applied no Privacy at all.
//
// A pseudonymised address is an IPv6 address in fd00::/8 (a unique-local
// range no client comes from) whose other 120 bits are the HMAC of the
// address: it stays an address, so rollups, sketches and top-k work on it
// unchanged, and the same client always maps to the same pseudonym under
// one key. A pseudonymised user id is "h:" and 22 base64url characters.
//
// The zero value (and nil) keeps everything and records nothing; use
// NewPrivacy(Keep, Keep, nil) to keep everything and say so. Privacy is not safe
// for concurrent use (it reuses an HMAC state); give each writer its own.
type Privacy struct {
	addrMode, userMode string
	label              string
	mac                hash.Hash
	sum                []byte
}

// NewPrivacy returns the treatment addrMode (keep, truncate or hmac) and
// userMode (keep or hmac). key is the HMAC key, at least 32 bytes, needed
// when either mode is hmac.
func NewPrivacy(addrMode, userMode string, key []byte) (*Privacy, error) {
	if addrMode == "" {
		addrMode = Keep
	}
	if userMode == "" {
		userMode = Keep
	}
	if addrMode != Keep && addrMode != Truncate && addrMode != HMAC {
		return nil, fmt.Errorf("privacy: address mode %q: want keep, truncate or hmac", addrMode)
	}
	if userMode != Keep && userMode != HMAC {
		return nil, fmt.Errorf("privacy: user mode %q: want keep or hmac", userMode)
	}
	p := &Privacy{addrMode: addrMode, userMode: userMode, label: addrMode + "/" + userMode}
	if addrMode == HMAC || userMode == HMAC {
		if len(key) < 32 {
			return nil, errors.New("privacy: hmac needs a key of at least 32 bytes")
		}
		p.mac = hmac.New(sha256.New, key)
	}
	return p, nil
}

// Label is what Apply records in Decision.Privacy, such as "truncate/keep".
func (p *Privacy) Label() string {
	if p == nil {
		return ""
	}
	return p.label
}

// Apply treats d's client address and user id in place and records the
// treatment. Events that carry neither (drop reports) are left alone; a
// nil Privacy leaves everything.
func (p *Privacy) Apply(d *Decision) {
	if p == nil || d.Kind == KindDrops {
		return
	}
	d.Privacy = p.label
	if p.addrMode == Keep && p.userMode == Keep {
		return
	}
	if d.ClientIP.IsValid() {
		switch p.addrMode {
		case Truncate:
			bits := 24
			if d.ClientIP.Is6() {
				bits = 48
			}
			if pre, err := d.ClientIP.Prefix(bits); err == nil {
				d.ClientIP = pre.Addr()
			}
		case HMAC:
			d.ClientIP = p.pseudoAddr(d.ClientIP)
		}
	}
	if d.UserID != "" && p.userMode == HMAC {
		d.UserID = p.pseudoUser(d.UserID)
	}
}

func (p *Privacy) digest(kind byte, b []byte) []byte {
	p.mac.Reset()
	p.mac.Write([]byte{kind})
	p.mac.Write(b)
	p.sum = p.mac.Sum(p.sum[:0])
	return p.sum
}

func (p *Privacy) pseudoAddr(a netip.Addr) netip.Addr {
	b := a.Unmap().As16()
	if a.Is4() || a.Is4In6() {
		b = [16]byte{12: b[12], 13: b[13], 14: b[14], 15: b[15]} // one pseudonym per IPv4 address however written
	}
	sum := p.digest('a', b[:])
	var out [16]byte
	out[0] = 0xfd
	copy(out[1:], sum[:15])
	return netip.AddrFrom16(out)
}

func (p *Privacy) pseudoUser(u string) string {
	sum := p.digest('u', []byte(u))
	return "h:" + base64.RawURLEncoding.EncodeToString(sum[:16])
}

// Private returns a BatchWriter that applies p to every event of a batch,
// in place, before handing the batch to w. A nil p returns w; keep/keep
// still wraps w, to record the choice in every event.
func Private(p *Privacy, w BatchWriter) BatchWriter {
	if p == nil {
		return w
	}
	return &private{p: p, w: w}
}

type private struct {
	p *Privacy
	w BatchWriter
}

func (pw *private) WriteBatch(ds []Decision) error {
	for i := range ds {
		pw.p.Apply(&ds[i])
	}
	return pw.w.WriteBatch(ds)
}

func (pw *private) Flush() error { return pw.w.Flush() }
