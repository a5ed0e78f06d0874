package challenge

import (
	"encoding/base64"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

const ttl = 30 * time.Minute

// testKey returns a base64 key of n bytes, each b.
func testKey(b byte, n int) string {
	return base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(rune(b)), n)))
}

var (
	keyNew = testKey('n', 32)
	keyOld = testKey('o', 48)
)

func mustParse(t testing.TB, s string) *Keyring {
	t.Helper()
	k, err := ParseKeys(s)
	if err != nil {
		t.Fatalf("ParseKeys: %v", err)
	}
	return k
}

// field replaces the i'th dot-separated field of tok.
func field(tok string, i int, v string) string {
	f := strings.Split(tok, ".")
	f[i] = v
	return strings.Join(f, ".")
}

func TestVerify(t *testing.T) {
	kr := mustParse(t, "k1:"+keyNew)
	other := mustParse(t, "k1:"+keyOld) // same kid, other key
	subject := Subject(netip.MustParseAddr("203.0.113.7"), "")
	tok := kr.Issue(subject, now, ttl)
	exp := now.Add(ttl)

	macText := strings.Split(tok, ".")[3]
	flipped := []byte(macText)
	flipped[5] = map[bool]byte{true: 'B', false: 'A'}[flipped[5] == 'A'] // another letter, another MAC
	laterExp := strconv.FormatInt(exp.Add(time.Hour).Unix(), 10)

	cases := []struct {
		name    string
		k       *Keyring
		token   string
		subject string
		at      time.Time
		want    error
	}{
		{"round trip", kr, tok, subject, now, nil},
		{"just before expiry", kr, tok, subject, exp.Add(-time.Second), nil},
		{"at expiry", kr, tok, subject, exp, ErrExpired},
		{"expired", kr, tok, subject, exp.Add(time.Hour), ErrExpired},
		{"other identity", kr, tok, Subject(netip.MustParseAddr("203.0.113.8"), ""), now, ErrBadSignature},
		{"user subject for ip token", kr, tok, Subject(netip.MustParseAddr("203.0.113.7"), "alice"), now, ErrBadSignature},
		{"flipped MAC byte", kr, field(tok, 3, string(flipped)), subject, now, ErrBadSignature},
		{"changed expiry", kr, field(tok, 2, laterExp), subject, now, ErrBadSignature},
		{"changed expiry after it passed", kr, field(tok, 2, laterExp), subject, exp.Add(time.Minute), ErrBadSignature},
		{"same kid other key", other, tok, subject, now, ErrBadSignature},
		{"unknown kid", kr, field(tok, 1, "k9"), subject, now, ErrUnknownKey},
		{"nil keyring", nil, tok, subject, now, ErrUnknownKey},
		{"empty", kr, "", subject, now, ErrMalformed},
		{"wrong version", kr, field(tok, 0, "v2"), subject, now, ErrMalformed},
		{"missing field", kr, "v1.k1." + macText, subject, now, ErrMalformed},
		{"extra field", kr, tok + ".x", subject, now, ErrMalformed},
		{"bad kid", kr, field(tok, 1, "k/1"), subject, now, ErrMalformed},
		{"long kid", kr, field(tok, 1, strings.Repeat("k", 17)), subject, now, ErrMalformed},
		{"leading zero expiry", kr, field(tok, 2, "0"+strconv.FormatInt(exp.Unix(), 10)), subject, now, ErrMalformed},
		{"signed expiry", kr, field(tok, 2, "+"+strconv.FormatInt(exp.Unix(), 10)), subject, now, ErrMalformed},
		{"huge expiry", kr, field(tok, 2, "99999999999999999999"), subject, now, ErrMalformed},
		{"short MAC", kr, tok[:len(tok)-1], subject, now, ErrMalformed},
		{"padded MAC", kr, tok + "=", subject, now, ErrMalformed},
		{"non-canonical MAC", kr, field(tok, 3, macText[:42]+nonCanonical(macText[42])), subject, now, ErrMalformed},
		{"oversized", kr, tok + strings.Repeat("A", MaxTokenLen), subject, now, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.k.Verify(c.token, c.subject, c.at)
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("Verify: error %v, want %v", err, c.want)
			}
			switch {
			case err == nil || errors.Is(err, ErrExpired):
				if !got.Equal(exp) {
					t.Errorf("expires %v, want %v", got, exp)
				}
			default:
				if !got.IsZero() {
					t.Errorf("expires %v with error %v, want zero", got, err)
				}
			}
		})
	}
}

// nonCanonical returns another base64url letter that decodes to the same
// 32 bytes as the final letter c: the final letter of 43 carries 4 bits, and
// its low 2 bits must be zero in canonical form.
func nonCanonical(c byte) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, c)
	return string(alphabet[i|1])
}

func TestIssue(t *testing.T) {
	kr := mustParse(t, "new:"+keyNew+",old:"+keyOld)
	tok := kr.Issue("ip:203.0.113.7", now, ttl)
	want := "v1.new." + strconv.FormatInt(now.Add(ttl).Unix(), 10) + "."
	if !strings.HasPrefix(tok, want) || len(tok) != len(want)+43 {
		t.Errorf("Issue = %q, want %q followed by 43 MAC characters", tok, want)
	}
	if strings.Contains(tok, "203.0.113.7") {
		t.Errorf("token %q shows the subject", tok)
	}
	if got := kr.Issue("s", now.Add(-time.Hour), 500*time.Millisecond); got != kr.Issue("s", now.Add(-time.Hour), 0) {
		t.Errorf("expiry is not rounded down to the second")
	}
	if got := kr.Issue("s", time.Unix(-100, 0), 0); !strings.HasPrefix(got, "v1.new.0.") {
		t.Errorf("Issue before 1970 = %q, want expiry 0", got)
	}
	if _, err := kr.Verify(kr.Issue("s", time.Unix(-100, 0), 0), "s", now); !errors.Is(err, ErrExpired) {
		t.Errorf("token from before 1970: %v, want ErrExpired", err)
	}
	var nilRing *Keyring
	if got := nilRing.Issue("s", now, ttl); got != "" {
		t.Errorf("nil keyring issued %q", got)
	}
	if got := (&Keyring{}).Issue("s", now, ttl); got != "" {
		t.Errorf("zero keyring issued %q", got)
	}
}

func TestRotation(t *testing.T) {
	old := mustParse(t, "k0:"+keyOld)
	rotated := mustParse(t, "k1:"+keyNew+", k0:"+keyOld)
	retired := mustParse(t, "k1:"+keyNew)
	const subject = "user:alice"
	oldTok := old.Issue(subject, now, ttl)
	newTok := rotated.Issue(subject, now, ttl)
	if !strings.HasPrefix(newTok, "v1.k1.") {
		t.Fatalf("rotated keyring signs with %q, want the first key k1", newTok)
	}
	f := func(name string, k *Keyring, tok string, want error) {
		t.Helper()
		if _, err := k.Verify(tok, subject, now); !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	f("old token, new key prepended", rotated, oldTok, nil)
	f("new token, rotated keyring", rotated, newTok, nil)
	f("new token, old keyring", old, newTok, ErrUnknownKey)
	f("old token, old key removed", retired, oldTok, ErrUnknownKey)
	f("new token, old key removed", retired, newTok, nil)
}

func TestParseKeys(t *testing.T) {
	secret := strings.Repeat("s", 40)
	b64 := base64.StdEncoding.EncodeToString([]byte(secret))
	cases := []struct {
		name string
		in   string
		want string // "" for success
	}{
		{"one", "k1:" + b64, ""},
		{"two with spaces", " k1:" + b64 + " , k0 : " + b64 + " ", ""},
		{"raw std", "k1:" + base64.RawStdEncoding.EncodeToString([]byte(secret+"?")), ""},
		{"url", "k1:" + base64.URLEncoding.EncodeToString([]byte(secret+"??>")), ""},
		{"raw url", "a_-Z9:" + base64.RawURLEncoding.EncodeToString([]byte(secret+"??>")), ""},
		{"sixteen-char kid", strings.Repeat("k", 16) + ":" + b64, ""},
		{"empty", "", "no keys"},
		{"blank", "  ", "no keys"},
		{"empty entry", "k1:" + b64 + ",", "entry 2 of 2 is empty"},
		{"no colon", b64, "entry 1 of 1 has no ':'"},
		{"empty kid", ":" + b64, "entry 1 of 1: key id of 0 bytes is not [A-Za-z0-9_-]{1,16}"},
		{"long kid", strings.Repeat("k", 17) + ":" + b64, "entry 1 of 1: key id of 17 bytes"},
		{"bad kid", "k1:" + b64 + ",k.2:" + b64, "entry 2 of 2: key id of 3 bytes"},
		{"reversed", b64 + ":k1", "entry 1 of 1: key id of"},
		{"not base64", "k1:" + b64[:10] + "!" + b64[11:], `entry 1 of 1 (kid "k1"): key is not base64`},
		{"short key", "k1:" + testKey('x', 31), `entry 1 of 1 (kid "k1"): key is 31 bytes; want at least 32`},
		{"empty key", "k1:", `entry 1 of 1 (kid "k1"): key is 0 bytes`},
		{"duplicate kid", "k1:" + b64 + ",k0:" + b64 + ",k1:" + b64, `entry 3 of 3: kid "k1" repeats entry 1`},
		{"too many", strings.Repeat("k:"+b64+",", MaxKeys) + "k:" + b64, "17 entries; want at most 16"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k, err := ParseKeys(c.in)
			if c.want == "" {
				if err != nil || k == nil {
					t.Fatalf("ParseKeys: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ParseKeys: error %v, want one containing %q", err, c.want)
			}
			if strings.Contains(err.Error(), b64[:16]) || strings.Contains(err.Error(), secret[:16]) {
				t.Errorf("error %q shows key material", err)
			}
		})
	}
}

func TestSubject(t *testing.T) {
	f := func(addr netip.Addr, user, want string) {
		t.Helper()
		if got := Subject(addr, user); got != want {
			t.Errorf("Subject(%v, %q) = %q, want %q", addr, user, got, want)
		}
	}
	f(netip.MustParseAddr("203.0.113.7"), "", "ip:203.0.113.7")
	f(netip.MustParseAddr("::ffff:203.0.113.7"), "", "ip:203.0.113.7")
	f(netip.MustParseAddr("2001:db8:1:2::"), "", "ip:2001:db8:1:2::")
	f(netip.MustParseAddr("203.0.113.7"), "alice", "user:alice")
	f(netip.Addr{}, "alice", "user:alice")
	f(netip.Addr{}, "", "ip:")
}

func TestVerifyDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	kr := mustParse(t, "k1:"+keyNew+",k0:"+keyOld)
	tok := kr.Issue("ip:203.0.113.7", now, ttl)
	kr.Verify(tok, "ip:203.0.113.7", now) // fill the pool
	if n := testing.AllocsPerRun(100, func() { kr.Verify(tok, "ip:203.0.113.7", now) }); n != 0 {
		t.Errorf("Verify: %v allocations, want 0", n)
	}
}

func BenchmarkVerify(b *testing.B) {
	kr := mustParse(b, "k1:"+keyNew+",k0:"+keyOld)
	const subject = "ip:203.0.113.7"
	tok := kr.Issue(subject, now, ttl)
	b.Run("valid", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := kr.Verify(tok, subject, now); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("valid-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				kr.Verify(tok, subject, now)
			}
		})
	})
	b.Run("malformed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			kr.Verify("v1.k1.garbage", subject, now)
		}
	})
}

func BenchmarkIssue(b *testing.B) {
	kr := mustParse(b, "k1:"+keyNew)
	b.ReportAllocs()
	for b.Loop() {
		kr.Issue("ip:203.0.113.7", now, ttl)
	}
}
