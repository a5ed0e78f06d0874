package loopback

import "testing"

func TestHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST:1": true, "127.0.0.1": true, "127.0.0.1:9092": true, "127.1.2.3:80": true,
		"[::1]:9092": true, "[::1]": true, "::1": true,
		"": false, "attacker.example": false, "attacker.example:6060": false, "127.0.0.1.nip.io": false,
		"localhost.attacker.example": false, "0.0.0.0:80": false, "[::]:80": false, "10.0.0.1": false, "[fe80::1%25lo]:80": false,
	} {
		if got := Host(host); got != want {
			t.Errorf("Host(%q) = %v, want %v", host, got, want)
		}
	}
}
