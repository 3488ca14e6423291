package runlog

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// asyncIO writes a file opened for direct I/O through Linux's native asynchronous I/O
// (io_submit), and waits for each write's end on an eventfd in Go's network poller. A
// commit's wait for the disk then leaves the processor to other goroutines at once,
// where a write system call held it: Go's runtime hands a processor blocked in a system
// call to other goroutines only once it notices, which, under load, came after most of
// the write (the committer's writes held a processor idle an eighth of the time). One
// write at a time: the log has one writer.
type asyncIO struct {
	ctx uintptr
	// f is the file written, held so that its descriptor, fd, stays its own.
	f  *os.File
	fd int
	// efd is the eventfd the kernel signals a write's end on, read through the poller
	// (efd.Fd would put it in blocking mode: efdNum is its number).
	efd    *os.File
	efdNum int
}

// iocb is the kernel's struct iocb (linux/aio_abi.h), as little-endian 64-bit
// platforms lay it out (newAsyncIO checks).
type iocb struct {
	_      uint64    // aio_data
	_      [2]uint32 // aio_key, aio_rw_flags
	opcode uint16
	_      int16 // aio_reqprio
	fildes uint32
	buf    uint64
	nbytes uint64
	offset int64
	_      uint64 // aio_reserved2
	flags  uint32
	resfd  uint32
}

// ioEvent is the kernel's struct io_event.
type ioEvent struct {
	_, _ uint64 // data, obj
	res  int64
	_    int64 // res2
}

const (
	iocbCmdPwrite = 1
	iocbFlagResfd = 1 << 0
)

// errNoAsyncIO is an asynchronous write the kernel refused to start: it is to be made
// the usual way.
var errNoAsyncIO = errors.New("runlog: asynchronous I/O refused")

// asyncWrites counts the writes made asynchronously, for tests.
var asyncWrites atomic.Int64

// newAsyncIO sets up asynchronous writes of f, or returns nil where the platform, the
// kernel or f's file system has none to trust. Only ext4 and XFS: their direct writes
// sync (O_DSYNC) before they signal their end; btrfs, on some kernels of 2021–2022,
// signalled an asynchronous one before its sync.
func newAsyncIO(f *os.File) *asyncIO {
	switch runtime.GOARCH {
	case "amd64", "arm64", "riscv64", "loong64", "ppc64le":
	default:
		return nil
	}
	if unsafe.Sizeof(iocb{}) != 64 || unsafe.Sizeof(ioEvent{}) != 32 {
		return nil
	}
	fd := -1
	var fs unix.Statfs_t
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(u uintptr) {
			if unix.Fstatfs(int(u), &fs) == nil {
				fd = int(u)
			}
		})
	}
	if fd < 0 || (fs.Type != unix.EXT4_SUPER_MAGIC && fs.Type != unix.XFS_SUPER_MAGIC) {
		return nil
	}
	var ctx uintptr
	if _, _, e := syscall.Syscall(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return nil // ENOSYS, or the system's aio-max-nr reached
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_, _, _ = syscall.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
		return nil
	}
	return &asyncIO{ctx: ctx, f: f, fd: fd, efd: os.NewFile(uintptr(efd), "commit-log-eventfd"), efdNum: efd}
}

// writeAt writes b at off and waits until the write ended, as a write system call
// does: the bytes written, or the write's error. errNoAsyncIO says it did not start. b
// must be on the heap (the kernel reads it after io_submit returns, while this goroutine
// waits in the poller and its stack may move).
func (a *asyncIO) writeAt(b []byte, off int64) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	cb := iocb{opcode: iocbCmdPwrite, fildes: uint32(a.fd), buf: uint64(uintptr(unsafe.Pointer(&b[0]))), nbytes: uint64(len(b)),
		offset: off, flags: iocbFlagResfd, resfd: uint32(a.efdNum)}
	cbs := [1]*iocb{&cb}
	for {
		n, _, e := syscall.Syscall(unix.SYS_IO_SUBMIT, a.ctx, 1, uintptr(unsafe.Pointer(&cbs[0])))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 || n != 1 {
			return 0, fmt.Errorf("%w: %v", errNoAsyncIO, e) // EINVAL, EAGAIN, EOPNOTSUPP...
		}
		break
	}
	// The write is under way and b is the kernel's until it ends: this waits for its
	// event, whatever happens. The wait is in the poller; io_getevents takes the event
	// (and waits for it itself, were the read to fail).
	var count [8]byte
	_, _ = a.efd.Read(count[:])
	var ev ioEvent
	for {
		n, _, e := syscall.Syscall6(unix.SYS_IO_GETEVENTS, a.ctx, 1, 1, uintptr(unsafe.Pointer(&ev)), 0, 0)
		if e == syscall.EINTR || (e == 0 && n == 0) {
			continue
		}
		if e != 0 {
			// Only a context that is not one (it is, until close) gets here. Returning
			// would hand the caller a buffer the kernel may still read.
			panic(fmt.Sprintf("runlog: waiting for a write of the commit log: io_getevents: %v", e))
		}
		break
	}
	runtime.KeepAlive(b)
	runtime.KeepAlive(a.f)
	if ev.res < 0 {
		return 0, syscall.Errno(-ev.res)
	}
	asyncWrites.Add(1)
	return int(ev.res), nil
}

// close releases the context (io_destroy waits for the kernel's grace period: tens of
// milliseconds) and the eventfd.
func (a *asyncIO) close() {
	_, _, _ = syscall.Syscall(unix.SYS_IO_DESTROY, a.ctx, 0, 0)
	_ = a.efd.Close()
}
