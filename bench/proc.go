package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// keepLines bounds the output kept per child process: enough to explain a failure.
const keepLines = 200

// proc is a child process of the benchmark. It is in its own process group, gets SIGKILL
// when the benchmark dies (Pdeathsig), and keeps the tail of its output for errors.
type proc struct {
	name string
	cmd  *exec.Cmd

	mu      sync.Mutex
	lines   []string
	seen    int           // lines ever read, so that waiters can tell new lines from old
	changed chan struct{} // closed and replaced on every line
	done    chan struct{}
	err     error
}

// startProc runs bin with args. env nil inherits the benchmark's environment.
func startProc(name, bin string, env []string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		_ = pr.Close()
		_ = pw.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	_ = pw.Close()
	p := &proc{name: name, cmd: cmd, changed: make(chan struct{}), done: make(chan struct{})}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			if len(p.lines) > keepLines {
				p.lines = p.lines[len(p.lines)-keepLines:]
			}
			p.seen++
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		}
		_ = pr.Close()
	}()
	go func() {
		err := cmd.Wait()
		<-readDone
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// tail is the output kept so far.
func (p *proc) tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitJSON waits for a JSON output line whose "msg" is msg and returns it decoded.
func (p *proc) waitJSON(ctx context.Context, msg string) (map[string]any, error) {
	checked := 0
	for {
		p.mu.Lock()
		lines, seen, changed := p.lines, p.seen, p.changed
		p.mu.Unlock()
		// Only the lines not looked at yet; the slice holds the last len(lines) of seen.
		for i := max(0, len(lines)-(seen-checked)); i < len(lines); i++ {
			var m map[string]any
			if json.Unmarshal([]byte(lines[i]), &m) == nil && m["msg"] == msg {
				return m, nil
			}
		}
		checked = seen
		select {
		case <-changed:
		case <-p.done:
			p.mu.Lock()
			more := p.seen > checked
			p.mu.Unlock()
			if more {
				continue
			}
			return nil, fmt.Errorf("%s exited (%v) before logging %q:\n%s", p.name, p.exitErr(), msg, p.tail())
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: waiting for %q: %w\n%s", p.name, msg, ctx.Err(), p.tail())
		}
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// stop sends SIGTERM and waits up to timeout, then kills the process group.
func (p *proc) stop(timeout time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
	}
}

// kill sends SIGKILL to the process group and waits for the process to be gone.
func (p *proc) kill() {
	if !p.exited() {
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	}
	<-p.done
}

// childEnv is the benchmark's environment without any OTEL_* variable, plus extra: each
// child's telemetry is exactly what its variant asks for.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// vmRSS reads a process's resident set size in KiB from /proc.
func vmRSS(pid int) (int64, error) {
	return procStatusKiB(pid, "VmRSS:")
}

func procStatusKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			var kib int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kib); err != nil {
				return 0, fmt.Errorf("/proc/%d/status %s %q: %w", pid, field, rest, err)
			}
			return kib, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s line", pid, field)
}

// cpuTime is the CPU time a process has used so far: the sum of its threads' time on a
// CPU from /proc/<pid>/task/*/schedstat (nanoseconds), or, without schedstat, utime +
// stime from /proc/<pid>/stat (clock ticks of 10 ms).
func cpuTime(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err == nil {
		var total time.Duration
		ok := true
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
			if err != nil {
				continue // the thread is gone
			}
			var ns int64
			if _, err := fmt.Sscan(string(b), &ns); err != nil {
				ok = false
				break
			}
			total += time.Duration(ns)
		}
		if ok {
			return total, nil
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces: the fields after it start past the last ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	var utime, stime int64
	if _, err := fmt.Sscan(f[11], &utime); err != nil {
		return 0, err
	}
	if _, err := fmt.Sscan(f[12], &stime); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}
