package runlog

import (
	"os"
	"syscall"
)

// syncWrites opens the commit log so that each write returns once its data is on disk
// (O_DSYNC): a commit is one system call instead of a write and an fdatasync.
const syncWrites = syscall.O_DSYNC

// directWrites opens it for direct I/O as well, where the file system allows it.
const directWrites = syscall.O_DIRECT

// syncData makes f's written data durable: fdatasync, which skips the file's metadata
// when its length did not change.
func syncData(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
