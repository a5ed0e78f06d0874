//go:build !linux

package emf

import "net"

// agentUnacked cannot read the send queue here: documents count as
// written once the kernel takes them.
func agentUnacked(*net.TCPConn) (int, error) { return 0, errAgentNoQueue }

// agentAbort cannot read the send queue here, and leaves the reset to
// the caller's close.
func agentAbort(*net.TCPConn) (int, error) { return 0, errAgentNoQueue }

// agentReset cannot read the TCP state here.
func agentReset(*net.TCPConn) bool { return false }

// agentRefused does not read pending socket errors here; a refusal shows
// as an error of the next write.
func agentRefused(*net.UDPConn) bool { return false }
