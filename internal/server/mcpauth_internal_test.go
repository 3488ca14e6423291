package server

import (
	"fmt"
	"testing"
)

// The MCP endpoint remembers which caller opened each session, up to maxMCPSessions
// (the oldest forgotten first), and forgets a session its caller ended.
func TestMCPSessionOwners(t *testing.T) {
	m := &mcpAuth{owners: map[string]string{}}
	for i := range maxMCPSessions + 2 {
		m.bind(fmt.Sprintf("s%d", i), "acme\x00u1")
	}
	if len(m.owners) != maxMCPSessions || len(m.order) != maxMCPSessions {
		t.Fatalf("%d owners, %d in order, want %d", len(m.owners), len(m.order), maxMCPSessions)
	}
	if _, ok := m.owners["s0"]; ok {
		t.Error("the oldest session is still remembered past the bound")
	}
	m.bind("s5", "globex\x00u2") // a session id is bound once, to the caller that opened it
	if m.owners["s5"] != "acme\x00u1" {
		t.Errorf("s5 belongs to %q", m.owners["s5"])
	}
	m.forget("s5")
	if _, ok := m.owners["s5"]; ok || len(m.order) != maxMCPSessions-1 {
		t.Errorf("s5 remembered after its end: %v, %d in order", ok, len(m.order))
	}
	m.forget("unknown") // nothing to forget
}
