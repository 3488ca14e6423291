//go:build unix && !linux

package harness

import "syscall"

// ChildProcAttr is the process attributes of a child a test or benchmark starts: a
// process group of its own (so that its whole group can be signalled) and credentials
// cred when not nil. Only Linux kills the child when this process dies.
func ChildProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}
