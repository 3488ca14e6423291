package harness

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// freeLoopbackPort returns a loopback port that was free a moment ago, for a process
// that must listen on a known port, possibly again after it was killed.
//
// The port is chosen below the kernel's ephemeral range (ip_local_port_range) when there
// is room there: no process is given such a port by listening on port 0 or by dialling
// out, so a port released by a killed process stays free for its restart however many
// connections the machine opens meanwhile. Within the ephemeral range another test's
// listener, or an outgoing connection (a dialler reconnecting to the very port, which
// Linux may connect to itself), could take it while the process is down.
func freeLoopbackPort() (int, error) {
	lo, hi := reservableRange()
	if hi-lo < 1000 {
		return ephemeralPort()
	}
	for range 64 {
		p := lo + rand.IntN(hi-lo)
		if !claimPort(p) {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if errors.Is(err, syscall.EADDRINUSE) {
			continue // some service listens there
		}
		if err != nil {
			// Not the port's fault (no loopback, a refused bind): what port 0 gives.
			return ephemeralPort()
		}
		if err := l.Close(); err != nil {
			return 0, err
		}
		return p, nil
	}
	return 0, errors.New("no free loopback port below the ephemeral range after 64 tries")
}

// reservableRange is [lo, hi), the ports from 10000 up to the ephemeral range's start.
func reservableRange() (lo, hi int) {
	const lowest = 10000
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	start, err := strconv.Atoi(f[0])
	if err != nil || start <= lowest {
		return 0, 0
	}
	return lowest, start
}

var claimed struct {
	sync.Mutex
	ports map[int]bool
}

// claimPort reports whether p was not handed out before in this process.
func claimPort(p int) bool {
	claimed.Lock()
	defer claimed.Unlock()
	if claimed.ports[p] {
		return false
	}
	if claimed.ports == nil {
		claimed.ports = map[int]bool{}
	}
	claimed.ports[p] = true
	return true
}

func ephemeralPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	p := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	return p, nil
}
