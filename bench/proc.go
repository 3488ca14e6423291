package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/harness"
)

// keepLines bounds the output kept per child process: enough to explain a failure.
const keepLines = 200

// proc is a child process of the benchmark (internal/harness: its own process group,
// killed if the benchmark dies, the tail of its output kept for errors).
type proc struct{ *harness.Proc }

// startProc runs bin with args. env nil inherits the benchmark's environment.
func startProc(name, bin string, env []string, args ...string) (*proc, error) {
	p, err := harness.StartWith(name, bin, harness.Options{Env: env, KeepLines: keepLines}, args...)
	if err != nil {
		return nil, err
	}
	return &proc{p}, nil
}

func (p *proc) pid() int { return p.PID() }

// tail is the output kept so far.
func (p *proc) tail() string { return p.Output() }

// waitJSON waits for a JSON output line whose "msg" is msg and returns it decoded.
func (p *proc) waitJSON(ctx context.Context, msg string) (map[string]any, error) {
	return p.WaitLog(ctx, msg)
}

// stop sends SIGTERM and waits up to timeout, then kills the process group.
func (p *proc) stop(timeout time.Duration) { _ = p.Stop(timeout) }

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
