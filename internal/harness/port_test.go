package harness

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeAddrIsOutsideTheEphemeralRange: an address for a process that is killed and
// started again on it lies below the kernel's ephemeral range, where no listener on port
// 0 and no outgoing connection of another process can take it while the process is
// down (a test restarting an orchestrator after an 18-second outage found its port
// taken), and no address is handed out twice.
func TestFreeAddrIsOutsideTheEphemeralRange(t *testing.T) {
	lo, hi := reservableRange()
	if hi-lo < 1000 {
		t.Skipf("no room below this machine's ephemeral range (%d..%d)", lo, hi)
	}
	seen := map[string]bool{}
	for range 200 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		_, ps, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		p, err := strconv.Atoi(ps)
		if err != nil {
			t.Fatal(err)
		}
		if p < lo || p >= hi {
			t.Fatalf("FreeAddr gave %s, want a port in [%d, %d), below the ephemeral range", addr, lo, hi)
		}
		if seen[addr] {
			t.Fatalf("FreeAddr gave %s twice", addr)
		}
		seen[addr] = true
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("cannot listen on the address FreeAddr gave: %v", err)
		}
		_ = l.Close()
	}
}
