package challenge

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func FuzzVerify(f *testing.F) {
	kr := mustParse(f, "new:"+keyNew+",old:"+keyOld)
	oldOnly := mustParse(f, "old:"+keyOld)
	for _, s := range []string{"ip:203.0.113.7", "user:alice", ""} {
		f.Add(kr.Issue(s, now, ttl), s, now.Unix())
		f.Add(oldOnly.Issue(s, now, ttl), s, now.Add(time.Hour).Unix())
	}
	f.Add("v1.new.1.AAAA", "ip:1.2.3.4", int64(0))
	f.Add("v1..", "", int64(-1))
	f.Add(strings.Repeat("v1.", 200), "x", int64(1<<62))
	f.Fuzz(func(t *testing.T, token, subject string, at int64) {
		now := time.Unix(at, 0)
		expires, err := kr.Verify(token, subject, now)
		if err != nil {
			return
		}
		// Whatever verifies is exactly what Issue writes for that subject
		// and expiry, under one of the keys.
		f := strings.Split(token, ".")
		exp, perr := strconv.ParseInt(f[2], 10, 64)
		if perr != nil || exp != expires.Unix() || !now.Before(expires) {
			t.Fatalf("accepted %q at %v, expires %v", token, now, expires)
		}
		at0 := time.Unix(exp, 0)
		if token != kr.Issue(subject, at0, 0) && token != oldOnly.Issue(subject, at0, 0) {
			t.Fatalf("accepted %q for %q, which Issue did not produce", token, subject)
		}
	})
}
