package harness

import "syscall"

// ChildProcAttr is the process attributes of a child a test or benchmark starts: a
// process group of its own (so that its whole group can be signalled), credentials cred
// when not nil, and, on Linux, SIGKILL once this process dies, so that no child outlives
// a crashed test.
func ChildProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
