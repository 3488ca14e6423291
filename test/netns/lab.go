// Package netns runs the mesh as pods would run it: every process in a network namespace
// of its own, with its own address on a bridge, so that a tool group is scaled by adding
// processes at new addresses and a partition is a link taken down.
package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/toolmesh/toolmesh/internal/harness"
)

// lab is a bridge on this host and the namespaces plugged into it.
type lab struct {
	t      *testing.T
	prefix string // of every name it makes: the test process's pid
	bridge string
	subnet string // the first three octets
	pods   []*pod
}

// pod is one network namespace: its address and the host end of its link.
type pod struct {
	name, ns, veth, ip string
}

// run runs a command, failing the test on error.
func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newLab makes the bridge, or skips the test where network namespaces cannot be made
// (no ip command, no CAP_NET_ADMIN).
func newLab(t *testing.T) *lab {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("network namespaces: no ip command (Debian's iproute2; make test installs it)")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("network namespaces: no nsenter command (Debian's util-linux) to start processes in them")
	}
	pid := os.Getpid()
	l := &lab{t: t, prefix: fmt.Sprintf("tm%d", pid), subnet: fmt.Sprintf("10.231.%d", pid%250)}
	l.bridge = l.prefix + "br"
	cleanStale()
	probe := l.prefix + "-probe"
	if err := run("ip", "netns", "add", probe); err != nil {
		t.Skipf("network namespaces cannot be made here (needs root or CAP_NET_ADMIN): %v", err)
	}
	_ = run("ip", "netns", "del", probe)
	t.Cleanup(l.close)
	for _, c := range [][]string{
		{"ip", "link", "add", l.bridge, "type", "bridge"},
		{"ip", "addr", "add", l.subnet + ".1/24", "dev", l.bridge},
		{"ip", "link", "set", l.bridge, "up"},
	} {
		if err := run(c...); err != nil {
			t.Fatal(err)
		}
	}
	// Where br_netfilter is loaded (Docker loads it), bridged frames pass iptables' FORWARD
	// chain, whose policy Docker sets to DROP: let this bridge's traffic through.
	if _, err := exec.LookPath("iptables"); err == nil {
		if run("iptables", "-C", "FORWARD", "-i", l.bridge, "-j", "ACCEPT") != nil {
			if run("iptables", "-I", "FORWARD", "-i", l.bridge, "-j", "ACCEPT") == nil {
				t.Cleanup(func() { _ = run("iptables", "-D", "FORWARD", "-i", l.bridge, "-j", "ACCEPT") })
			}
		}
	}
	return l
}

// cleanStale removes what an earlier test process, now dead, left behind.
func cleanStale() {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if pid, ok := ownerPID(e.Name()); ok && !alive(pid) {
			_ = run("ip", "netns", "del", e.Name())
		}
	}
	links, _ := filepath.Glob("/sys/class/net/tm*br")
	for _, l := range links {
		if pid, ok := ownerPID(filepath.Base(l)); ok && !alive(pid) {
			_ = run("ip", "link", "del", filepath.Base(l))
		}
	}
}

// ownerPID reads the pid out of a name this package made ("tm<pid>-..." or "tm<pid>br").
func ownerPID(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "tm")
	if !ok {
		return 0, false
	}
	end := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if end <= 0 {
		return 0, false
	}
	pid, err := strconv.Atoi(s[:end])
	return pid, err == nil
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// pod makes a namespace with address .<host> on the bridge.
func (l *lab) pod(name string, host int) *pod {
	l.t.Helper()
	n := len(l.pods)
	p := &pod{name: name, ns: fmt.Sprintf("%s-%d", l.prefix, n), veth: fmt.Sprintf("%sv%d", l.prefix, n), ip: fmt.Sprintf("%s.%d", l.subnet, host)}
	if len(p.veth) > 15 {
		l.t.Fatalf("interface name %s is too long", p.veth)
	}
	for _, c := range [][]string{
		{"ip", "netns", "add", p.ns},
		{"ip", "link", "add", p.veth, "type", "veth", "peer", "name", "eth0", "netns", p.ns},
		{"ip", "link", "set", p.veth, "master", l.bridge, "up"},
		{"ip", "-n", p.ns, "addr", "add", p.ip + "/24", "dev", "eth0"},
		{"ip", "-n", p.ns, "link", "set", "eth0", "up"},
		{"ip", "-n", p.ns, "link", "set", "lo", "up"},
	} {
		if err := run(c...); err != nil {
			l.t.Fatal(err)
		}
	}
	l.pods = append(l.pods, p)
	return p
}

// start runs bin in p's namespace (nsenter execs it: the process is bin itself, killed
// with this test process).
func (l *lab) start(p *pod, name, bin string, args ...string) *harness.Proc {
	l.t.Helper()
	proc, err := harness.StartWith(name, "nsenter", harness.Options{KeepLines: 5000}, append([]string{"--net=/run/netns/" + p.ns, "--", bin}, args...)...)
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { _ = proc.Kill() })
	return proc
}

// partition takes p's link down; heal brings it back.
func (l *lab) partition(p *pod) error { return run("ip", "link", "set", p.veth, "down") }
func (l *lab) heal(p *pod) error      { return run("ip", "link", "set", p.veth, "up") }

func (l *lab) close() {
	for _, p := range l.pods {
		_ = run("ip", "netns", "del", p.ns)
	}
	_ = run("ip", "link", "del", l.bridge)
}
