// Package harness starts toolmesh's binaries as real processes on loopback and watches
// them: the demo and the end-to-end tests use it. It signals and kills real processes and
// reads their JSON logs; it never reaches into their memory.
package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a running child process whose output is kept line by line.
type Proc struct {
	Name string
	cmd  *exec.Cmd

	mu      sync.Mutex
	lines   []string
	seen    int           // lines ever read; lines holds the last len(lines) of them
	keep    int           // lines kept at most; 0: all
	changed chan struct{} // closed and replaced on every new line
	done    chan struct{}
	err     error
}

// Options are the less common settings of StartWith.
type Options struct {
	// Echo, when set, receives every output line prefixed with the process name.
	Echo io.Writer
	// Env is the environment of the process; nil inherits this one.
	Env []string
	// KeepLines bounds the output kept (the last lines); 0 keeps everything.
	KeepLines int
}

// Start runs bin with args. Its stdout and stderr are kept (see Lines) and, when echo is
// not nil, copied there prefixed with the name.
func Start(name, bin string, echo io.Writer, args ...string) (*Proc, error) {
	return StartWith(name, bin, Options{Echo: echo}, args...)
}

// StartWith runs bin with args. The process is in its own process group and is killed
// if this process dies first, so no child outlives a crashed test or benchmark.
func StartWith(name, bin string, opts Options, args ...string) (*Proc, error) {
	echo := opts.Echo
	cmd := exec.Command(bin, args...)
	cmd.Env = opts.Env
	cmd.SysProcAttr = ChildProcAttr(nil)
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &Proc{Name: name, cmd: cmd, keep: opts.KeepLines, changed: make(chan struct{}), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		_ = pr.Close()
		_ = pw.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	_ = pw.Close()
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
		for sc.Scan() {
			line := sc.Text()
			if echo != nil {
				fmt.Fprintf(echo, "%-12s %s\n", name+"|", line)
			}
			p.mu.Lock()
			p.lines = append(p.lines, line)
			if p.keep > 0 && len(p.lines) > p.keep {
				p.lines = p.lines[len(p.lines)-p.keep:]
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

// PID is the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Lines returns the output so far.
func (p *Proc) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// Output returns the output so far as one string.
func (p *Proc) Output() string { return strings.Join(p.Lines(), "\n") }

// WaitLine waits for an output line, from the first one kept on, for which match is true.
func (p *Proc) WaitLine(ctx context.Context, match func(string) bool) (string, error) {
	checked := 0 // lines ever read that were looked at
	for {
		p.mu.Lock()
		lines, seen, changed := p.lines, p.seen, p.changed
		p.mu.Unlock()
		// lines holds the last len(lines) of the seen lines: look at the new ones.
		for i := max(0, len(lines)-(seen-checked)); i < len(lines); i++ {
			if match(lines[i]) {
				return lines[i], nil
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
			return "", fmt.Errorf("%s exited (%v) before the line appeared:\n%s", p.Name, p.ExitErr(), p.Output())
		case <-ctx.Done():
			return "", fmt.Errorf("%s: waiting for a log line: %w\n%s", p.Name, ctx.Err(), p.Output())
		}
	}
}

// WaitLog waits for a JSON log record whose msg is msg, and returns it decoded.
func (p *Proc) WaitLog(ctx context.Context, msg string) (map[string]any, error) {
	var rec map[string]any
	_, err := p.WaitLine(ctx, func(line string) bool {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != msg {
			return false
		}
		rec = m
		return true
	})
	return rec, err
}

// CountLogs counts the JSON log records whose msg is msg and that match attrs.
func (p *Proc) CountLogs(msg string, attrs map[string]string) int {
	n := 0
	for _, line := range p.Lines() {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != msg {
			continue
		}
		ok := true
		for k, v := range attrs {
			if fmt.Sprint(m[k]) != v {
				ok = false
			}
		}
		if ok {
			n++
		}
	}
	return n
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill sends SIGKILL to the process group and waits for the process to be gone.
func (p *Proc) Kill() error {
	if !p.Exited() {
		_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	}
	<-p.done
	return nil
}

// Wait waits up to timeout for the process to exit and returns its exit error.
func (p *Proc) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.ExitErr()
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %s", p.Name, timeout)
	}
}

// Stop sends SIGTERM and waits up to timeout for a clean exit; after that it kills.
func (p *Proc) Stop(timeout time.Duration) error {
	if p.Exited() {
		return p.ExitErr()
	}
	_ = p.Signal(syscall.SIGTERM)
	if err := p.Wait(timeout); err != nil {
		if !p.Exited() {
			_ = p.Kill()
			return fmt.Errorf("%s did not stop within %s after SIGTERM: killed", p.Name, timeout)
		}
		return err
	}
	return nil
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitErr is the process's exit error (nil for a clean exit); only meaningful once it
// has exited.
func (p *Proc) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// ErrNoAddress is returned when a serving log record carries no address.
var ErrNoAddress = errors.New("log record has no address")
