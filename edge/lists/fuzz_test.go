package lists

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// FuzzParse checks that whatever a list file holds, Parse either refuses
// it naming the file, or accepts entries that write back as lines which
// read as the same entries, one a line.
func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("10.0.0.1/8\n"))
	f.Add([]byte("user:a#b\n::ffff:1.2.3.4/128\n0.0.0.0/0\n"))
	f.Add([]byte("fe80::1%eth0\n"))
	f.Add([]byte("\xff\xfe\x00"))
	f.Add([]byte(`"user:a b" expires=2026-12-01T18:00:00Z by=alice reason="x \"y\" # z" pending=true` + "\n"))
	f.Add([]byte("203.0.113.9 removed=2026-12-01T17:40:00Z by=\"\\n203.0.113.10\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := ParseEntries(bytes.NewReader(data), "fuzz", Deny)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz:") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		var out []byte
		for i := range es {
			out = AppendLine(out, &es[i])
		}
		back, err := ParseEntries(bytes.NewReader(out), "back", Deny)
		if err != nil {
			t.Fatalf("written entries do not read back: %v\n%s", err, out)
		}
		if len(back) != len(es) || bytes.Count(out, []byte("\n")) != len(es) {
			t.Fatalf("%d entries wrote %d lines and read back as %d", len(es), bytes.Count(out, []byte("\n")), len(back))
		}
		for i := range es {
			if !sameEntry(es[i], back[i]) {
				t.Fatalf("entry %d: %+v read back as %+v", i, es[i], back[i])
			}
		}
		l := New(es, time.Unix(0, 0))
		if l.Len() > len(es) {
			t.Fatalf("Len %d > %d entries", l.Len(), len(es))
		}
	})
}

// FuzzAppendLine checks that a writer can never inject a second entry, or
// change the first, through the text of a user id, a reason or who wrote
// it: an entry Validate accepts writes as one line that reads back as
// itself.
func FuzzAppendLine(f *testing.F) {
	f.Add("alice", "scraper", "bob")
	f.Add("a b\n203.0.113.7", "x\" 1.2.3.4 #", "eve\r\nuser:mallory")
	f.Add("\x00", "\u2028", "=")
	f.Fuzz(func(t *testing.T, user, reason, by string) {
		e := Entry{List: Challenge, Target: "user:" + user, Reason: reason, By: by,
			Added: time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC), Expires: time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC)}
		if err := e.Validate(); err != nil {
			return
		}
		line := AppendLine(nil, &e)
		es, err := ParseEntries(bytes.NewReader(line), "fuzz", Challenge)
		if err != nil || len(es) != 1 || !sameEntry(es[0], e) {
			t.Fatalf("%+v wrote %q, read back %+v, %v", e, line, es, err)
		}
	})
}

func sameEntry(a, b Entry) bool {
	return a.List == b.List && a.Target == b.Target && a.Expires.Equal(b.Expires) && a.Added.Equal(b.Added) &&
		a.Removed.Equal(b.Removed) && a.Reason == b.Reason && a.By == b.By && a.Pending == b.Pending
}
