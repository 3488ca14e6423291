//go:build !linux

package runlog

import (
	"errors"
	"os"
	"sync/atomic"
)

// asyncIO: the commit log is written with write system calls.
type asyncIO struct{}

var errNoAsyncIO = errors.New("runlog: asynchronous I/O refused")

// asyncWrites counts the writes made asynchronously: none here.
var asyncWrites atomic.Int64

func newAsyncIO(*os.File) *asyncIO { return nil }

func (*asyncIO) writeAt([]byte, int64) (int, error) { return 0, errNoAsyncIO }

func (*asyncIO) close() {}
