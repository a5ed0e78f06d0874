package lists

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("10.0.0.1/8\n"))
	f.Add([]byte("user:a#b\n::ffff:1.2.3.4/128\n0.0.0.0/0\n"))
	f.Add([]byte("fe80::1%eth0\n"))
	f.Add([]byte("\xff\xfe\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := Parse(bytes.NewReader(data), "fuzz")
		if err != nil {
			if l != nil {
				t.Fatalf("Parse returned a list and an error %v", err)
			}
			if !strings.HasPrefix(err.Error(), "fuzz:") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		// Every entry of an accepted file is in the list, and nothing else
		// is counted.
		lines := strings.Split(string(bytes.TrimPrefix(data, []byte("\uFEFF"))), "\n")
		entries := 0
		for _, line := range lines {
			line, _, _ = strings.Cut(line, "#")
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			entries++
			if id, ok := strings.CutPrefix(line, "user:"); ok {
				if !l.Contains(netip.Addr{}, strings.TrimSpace(id)) {
					t.Fatalf("user %q not in the list", id)
				}
				continue
			}
			var a netip.Addr
			if p, err := netip.ParsePrefix(line); err == nil {
				a = p.Addr()
			} else if a, err = netip.ParseAddr(line); err != nil {
				t.Fatalf("accepted line %q that is no entry", line)
			}
			if !l.Contains(a, "") {
				t.Fatalf("entry %q not in the list", line)
			}
		}
		if l.Len() > entries {
			t.Fatalf("Len %d > %d entries", l.Len(), entries)
		}
	})
}
