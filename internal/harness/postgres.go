package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Postgres is a private PostgreSQL server for tests: its own data directory and port,
// never the machine's own server. Stop it with Stop.
type Postgres struct {
	// DSN connects to its database "toolmesh" as user "toolmesh".
	DSN  string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// PostgresBin finds the directory of PostgreSQL's server programs (initdb, postgres):
// $TOOLMESH_PG_BIN, the PATH, or Debian's /usr/lib/postgresql/<version>/bin.
func PostgresBin() (string, error) {
	if d := os.Getenv("TOOLMESH_PG_BIN"); d != "" {
		return d, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(real), nil
		}
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	if len(dirs) > 0 {
		return dirs[len(dirs)-1], nil
	}
	return "", errors.New("PostgreSQL's server programs are not installed (Debian: apt-get install postgresql; make test installs them)")
}

// PostgresOptions configure a private PostgreSQL server.
type PostgresOptions struct {
	// Durable keeps PostgreSQL's defaults (fsync on, every commit flushed before it is
	// acknowledged, the default shared buffers), as a production server runs. Tests that
	// only kill the orchestrator, never the database, leave it off: fsync=off and small
	// buffers are faster to start many of.
	Durable bool
}

// StartPostgres starts a private PostgreSQL server on a temporary directory and a free
// port on loopback, and creates the database "toolmesh". As root it runs the server as
// the user "postgres" (PostgreSQL refuses to run as root). It runs with fsync off.
func StartPostgres(ctx context.Context) (*Postgres, error) {
	return StartPostgresWith(ctx, PostgresOptions{})
}

// StartPostgresWith is StartPostgres with options.
func StartPostgresWith(ctx context.Context, opts PostgresOptions) (*Postgres, error) {
	bin, err := PostgresBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "toolmesh-pg-")
	if err != nil {
		return nil, err
	}
	p := &Postgres{dir: dir, done: make(chan struct{})}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root, PostgreSQL needs the user postgres: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	run := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(bin, name), args...)
		c.SysProcAttr = ChildProcAttr(cred)
		c.Env = append(os.Environ(), "LC_ALL=C")
		return c
	}
	data := filepath.Join(dir, "data")
	if out, err := run("initdb", "-D", data, "-U", "toolmesh", "--auth=trust", "--no-sync", "-E", "UTF8").CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	port, err := freeLoopbackPort() // one the server can listen on again after an outage
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	p.cmd = run("postgres", serverArgs(opts, data, dir, port)...)
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("postgres: %w", err)
	}
	go func() { _ = p.cmd.Wait(); _ = log.Close(); close(p.done) }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			_ = c.Close()
			break
		}
		select {
		case <-p.done:
			b, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres exited at start:\n%s", b)
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, errors.New("postgres did not start within 30s")
		}
	}
	base := fmt.Sprintf("postgres://toolmesh@%s/", addr)
	// The server accepts connections a moment after it listens: retry creating the
	// database for a while.
	var out []byte
	for i := 0; i < 100; i++ {
		out, err = run("createdb", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "toolmesh", "toolmesh").CombinedOutput()
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("createdb: %v\n%s", err, out)
	}
	p.DSN = base + "toolmesh?sslmode=disable"
	return p, nil
}

// Stop stops the server (SIGQUIT, then SIGKILL) and removes its directory.
func (p *Postgres) Stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	_ = os.RemoveAll(p.dir)
}

// Kill kills the server at once (SIGKILL), as a crash would, leaving its files: the
// postmaster and every backend (backends start sessions of their own, so killing the
// postmaster's process group does not reach them).
func (p *Postgres) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGSTOP) // no new backends while they are found
	for _, c := range children(pid) {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	<-p.done
}

// children are the processes whose parent is pid, from /proc.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after its ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

// serverArgs are the arguments of a private server of data on port, its socket in dir.
// A durable server runs with PostgreSQL's defaults (fsync on, 128 MB of shared buffers);
// the others with fsync off and small buffers, for tests that start many.
func serverArgs(opts PostgresOptions, data, dir string, port int) []string {
	settings := []string{"fsync=off", "shared_buffers=16MB"}
	if opts.Durable {
		settings = []string{"fsync=on"}
	}
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "synchronous_commit=on", "-c", "max_connections=200"}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	return args
}
