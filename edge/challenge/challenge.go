// Package challenge issues and verifies challenge tokens: proof that a
// client solved the CAPTCHA, which lets it past challenges until the token
// expires.
//
// # Token format
//
//	v1.<kid>.<expiry>.<mac>
//
// kid is the id of the key that signed the token ([A-Za-z0-9_-]{1,16}),
// expiry is the instant the token stops being valid in Unix seconds
// (decimal, no sign, no leading zeros), and mac is the unpadded base64url
// encoding of
//
//	HMAC-SHA256(key, "v1.<kid>.<expiry>." + subject)
//
// where subject names the identity the token was issued for (see
// [Subject]). The subject is not in the token: it is bound by the MAC, so a
// token does not reveal who it belongs to, and a token copied to another
// client does not verify there. The text the MAC covers parses in exactly
// one way, because neither kid nor expiry can contain a dot.
//
// # Verification
//
// Verify checks, in order: the token's syntax ([ErrMalformed]), its key id
// ([ErrUnknownKey]), its MAC for the subject presented ([ErrBadSignature]),
// and only then its expiry ([ErrExpired]), so that nothing about a forged
// token is believed. A token issued for another identity and a forged token
// are indistinguishable by design: both are a MAC that does not match, and
// telling them apart would need the subject inside the token. There is
// therefore no "wrong subject" error; both are ErrBadSignature.
//
// # Rotation
//
// A [Keyring] holds several keys. The first signs; all verify. To rotate,
// prepend a new key and, once every token signed by the old one has expired
// (one token TTL later), remove the old key; its tokens then fail with
// ErrUnknownKey.
package challenge

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/internal/clientip"
)

// Bounds on keys and tokens.
const (
	MaxTokenLen = 512 // longer tokens are ErrMalformed without further work
	MinKeyLen   = 32  // bytes of key material, the HMAC-SHA256 block of security
	MaxKeys     = 16  // keys in one keyring
	maxKidLen   = 16
)

const (
	prefix = "v1."
	macLen = 43 // base64url without padding of a SHA-256 sum
)

// The reasons a token does not verify. Callers branch on them with
// errors.Is; none of them carries the token or key material.
var (
	ErrMalformed    = errors.New("challenge token is malformed")
	ErrUnknownKey   = errors.New("challenge token is signed by an unknown key")
	ErrBadSignature = errors.New("challenge token has a bad signature or belongs to another client")
	ErrExpired      = errors.New("challenge token has expired")
)

var macEncoding = base64.RawURLEncoding.Strict()

// Keyring is a set of token keys: the first signs, all verify. It is
// immutable and safe for concurrent use. The zero value and the nil
// *Keyring hold no keys: they issue empty tokens and verify none.
type Keyring struct {
	keys []*key
}

// key is one HMAC key. Its pool holds keyed MAC states, so that Verify does
// not rebuild the HMAC pads on every call.
type key struct {
	id   string
	pool sync.Pool // of *macState
}

type macState struct {
	h   hash.Hash
	buf []byte // the signed text
	out []byte // the sum; a local array handed to h.Sum would escape
}

// maxPooledBuf bounds the scratch buffer kept in the pool, so one long
// subject does not pin memory.
const maxPooledBuf = 1 << 10

func newKey(id string, secret []byte) *key {
	k := &key{id: id}
	k.pool.New = func() any {
		return &macState{h: hmac.New(sha256.New, secret), buf: make([]byte, 0, 128), out: make([]byte, 0, sha256.Size)}
	}
	return k
}

// sum sets dst to HMAC-SHA256(key, signed + subject).
func (k *key) sum(dst *[sha256.Size]byte, signed, subject string) {
	st := k.pool.Get().(*macState)
	st.h.Reset()
	st.buf = append(append(st.buf[:0], signed...), subject...)
	st.h.Write(st.buf)
	st.out = st.h.Sum(st.out[:0])
	copy(dst[:], st.out)
	if cap(st.buf) <= maxPooledBuf {
		k.pool.Put(st)
	}
}

// ParseKeys parses a keyring from "kid1:BASE64KEY,kid0:BASE64KEY". The first
// key signs; all verify. Key ids are [A-Za-z0-9_-]{1,16} and unique; keys
// are standard or URL-safe base64, padded or not, and decode to at least
// MinKeyLen bytes. An error names the entry (counting from 1) and what is
// wrong with it, never the key material.
func ParseKeys(s string) (*Keyring, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("parse challenge keys: no keys; want kid:base64key[,kid:base64key...]")
	}
	entries := strings.Split(s, ",")
	if len(entries) > MaxKeys {
		return nil, fmt.Errorf("parse challenge keys: %d entries; want at most %d", len(entries), MaxKeys)
	}
	kr := &Keyring{keys: make([]*key, 0, len(entries))}
	for i, e := range entries {
		n := i + 1
		e = strings.TrimSpace(e)
		kid, b64, ok := strings.Cut(e, ":")
		kid = strings.TrimSpace(kid)
		switch {
		case e == "":
			return nil, fmt.Errorf("parse challenge keys: entry %d of %d is empty; want kid:base64key", n, len(entries))
		case !ok:
			return nil, fmt.Errorf("parse challenge keys: entry %d of %d has no ':' between key id and key; want kid:base64key", n, len(entries))
		case !validKid(kid):
			// The id is not quoted: a malformed entry may be key material.
			return nil, fmt.Errorf("parse challenge keys: entry %d of %d: key id of %d bytes is not [A-Za-z0-9_-]{1,16}", n, len(entries), len(kid))
		}
		secret, ok := decodeKey(strings.TrimSpace(b64))
		switch {
		case !ok:
			return nil, fmt.Errorf("parse challenge keys: entry %d of %d (kid %q): key is not base64", n, len(entries), kid)
		case len(secret) < MinKeyLen:
			return nil, fmt.Errorf("parse challenge keys: entry %d of %d (kid %q): key is %d bytes; want at least %d", n, len(entries), kid, len(secret), MinKeyLen)
		}
		for j, other := range kr.keys {
			if other.id == kid {
				return nil, fmt.Errorf("parse challenge keys: entry %d of %d: kid %q repeats entry %d", n, len(entries), kid, j+1)
			}
		}
		kr.keys = append(kr.keys, newKey(kid, secret))
	}
	return kr, nil
}

func decodeKey(s string) ([]byte, bool) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, true
		}
	}
	return nil, false
}

func validKid(s string) bool {
	if len(s) == 0 || len(s) > maxKidLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Issue returns a token for subject, signed by the first key, that expires
// ttl after now (rounded down to the second). Instants before 1970 are
// written as 0, an expired token. A keyring without keys returns "".
func (k *Keyring) Issue(subject string, now time.Time, ttl time.Duration) string {
	if k == nil || len(k.keys) == 0 {
		return ""
	}
	signer := k.keys[0]
	exp := max(now.Add(ttl).Unix(), 0)
	b := make([]byte, 0, len(prefix)+len(signer.id)+1+20+1+macLen)
	b = append(b, prefix...)
	b = append(b, signer.id...)
	b = append(b, '.')
	b = strconv.AppendInt(b, exp, 10)
	b = append(b, '.')
	var mac [sha256.Size]byte
	signer.sum(&mac, string(b), subject)
	b = macEncoding.AppendEncode(b, mac[:])
	return string(b)
}

// Verify checks token for subject at now and returns the instant it
// expires. The error is ErrMalformed, ErrUnknownKey, ErrBadSignature or
// ErrExpired; with ErrExpired the expiry is returned too, as it is
// authentic. Verify does not allocate.
func (k *Keyring) Verify(token, subject string, now time.Time) (expires time.Time, err error) {
	if len(token) > MaxTokenLen {
		return time.Time{}, ErrMalformed
	}
	rest, ok := strings.CutPrefix(token, prefix)
	if !ok {
		return time.Time{}, ErrMalformed
	}
	kid, rest, ok := strings.Cut(rest, ".")
	if !ok || !validKid(kid) {
		return time.Time{}, ErrMalformed
	}
	expText, macText, ok := strings.Cut(rest, ".")
	if !ok || len(macText) != macLen {
		return time.Time{}, ErrMalformed
	}
	exp, ok := parseExpiry(expText)
	if !ok {
		return time.Time{}, ErrMalformed
	}
	var got [sha256.Size]byte
	var src [macLen]byte // a stack copy: converting the string would allocate
	copy(src[:], macText)
	if n, err := macEncoding.Decode(got[:], src[:]); err != nil || n != len(got) {
		return time.Time{}, ErrMalformed
	}

	signer := k.lookup(kid)
	if signer == nil {
		return time.Time{}, ErrUnknownKey
	}
	var want [sha256.Size]byte
	signer.sum(&want, token[:len(token)-macLen], subject)
	if !hmac.Equal(got[:], want[:]) {
		return time.Time{}, ErrBadSignature
	}
	expires = time.Unix(exp, 0)
	if !now.Before(expires) {
		return expires, ErrExpired
	}
	return expires, nil
}

func (k *Keyring) lookup(kid string) *key {
	if k == nil {
		return nil
	}
	for _, c := range k.keys {
		if c.id == kid {
			return c
		}
	}
	return nil
}

// parseExpiry parses the canonical decimal form Issue writes: digits only,
// no leading zeros, within int64.
func parseExpiry(s string) (int64, bool) {
	if s == "" || len(s) > 19 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// Subject names the identity a token is bound to: "user:<id>" for an
// authenticated user, else "ip:<addr>". Callers pass the identity's counting
// address (identity.Identity.Addr), so a token survives address rotation
// within the IPv6 prefix the client is counted under. A zero addr gives
// "ip:", shared by every client without an address.
func Subject(addr netip.Addr, user string) string {
	if user != "" {
		return "user:" + user
	}
	if !addr.IsValid() {
		return "ip:"
	}
	return "ip:" + clientip.Of(addr).String()
}
