//go:build !linux

package runlog

import (
	"errors"
	"os"
)

// asyncIO: the commit log is written with write system calls.
type asyncIO struct{}

var errNoAsyncIO = errors.New("runlog: asynchronous I/O refused")

func newAsyncIO(*os.File) *asyncIO { return nil }

func (*asyncIO) writeAt([]byte, int64) (int, error) { return 0, errNoAsyncIO }

func (*asyncIO) close() {}
