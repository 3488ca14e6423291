// Package failpoint kills the process at a named point of its work when the environment
// asks for it, so that crash tests can crash it exactly there (between receiving a tool
// call's outcome and recording it, say) instead of at a random moment.
//
// TOOLMESH_FAILPOINT=name kills the process with SIGKILL the first time it reaches
// Hit(name); name@N the N-th time. Unset, Hit costs one atomic load.
package failpoint

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

var (
	once  sync.Once
	name  string
	after int64
	hits  atomic.Int64
	armed atomic.Bool
)

func load() {
	spec := os.Getenv("TOOLMESH_FAILPOINT")
	if spec == "" {
		return
	}
	n, count, _ := strings.Cut(spec, "@")
	after = 1
	if count != "" {
		if c, err := strconv.ParseInt(count, 10, 64); err == nil && c > 0 {
			after = c
		}
	}
	name = n
	armed.Store(true)
}

// Hit kills the process when TOOLMESH_FAILPOINT names this point and its count is
// reached.
func Hit(point string) {
	once.Do(load)
	if !armed.Load() || point != name {
		return
	}
	if hits.Add(1) == after {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
