package identity

import (
	"testing"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestUserCapIsTheReaders: the readers of the decisions refuse a user id
// or plan longer than the edge believes, and no shorter.
func TestUserCapIsTheReaders(t *testing.T) {
	if MaxUserLen != decisions.MaxUserIDLen {
		t.Errorf("identity.MaxUserLen %d, decisions.MaxUserIDLen %d", MaxUserLen, decisions.MaxUserIDLen)
	}
}
