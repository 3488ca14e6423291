//go:build linux

package runlog

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// An asynchronous write reports what a write system call would: the bytes written and
// the data in the file, or the kernel's error.
func TestAsyncIOWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 3*logBlock), 0o600); err != nil {
		t.Fatal(err)
	}
	f := openDirect(path)
	if f == nil {
		t.Skip("the file system of the temporary directory refuses direct I/O")
	}
	defer func() { _ = f.Close() }()
	a := newAsyncIO(f)
	if a == nil {
		t.Skip("no asynchronous I/O here")
	}
	defer a.close()
	buf := alignedBuf(nil, 2*logBlock)
	for i := range buf {
		buf[i] = byte(i % 251)
	}
	if n, err := a.writeAt(buf, logBlock); err != nil || n != len(buf) {
		t.Fatalf("writeAt = %d, %v; want %d", n, err, len(buf))
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got[logBlock:]) != string(buf) || string(got[:logBlock]) != string(make([]byte, logBlock)) {
		t.Fatalf("the file does not hold what was written (%v)", err)
	}
	// A write the device cannot take directly (not block-aligned in length): the same
	// outcome as a write system call's (EINVAL, or a write through the cache), or not
	// started.
	_, perr := f.WriteAt(buf[:100], 2*logBlock)
	if _, err := a.writeAt(buf[:100], 2*logBlock); !errors.Is(err, errNoAsyncIO) && errors.Is(err, syscall.EINVAL) != errors.Is(perr, syscall.EINVAL) {
		t.Errorf("a write of 100 bytes: %v; a write system call's: %v", err, perr)
	}
	if n, err := a.writeAt(buf[:logBlock], 0); err != nil || n != logBlock {
		t.Errorf("a write after a refused one: %d, %v", n, err)
	}
}

// A log whose asynchronous writes the kernel refuses to start writes its entries with
// write system calls from then on, losing none.
func TestCommitLogWithoutAsyncIO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db-commits")
	l, _, err := openCommitLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.aio == nil {
		t.Skip("no direct or asynchronous I/O here")
	}
	if err := l.write(1, []*write{logWrite("r", 1)}); err != nil {
		t.Fatal(err)
	}
	l.aio.fd = -1 // io_submit refuses a write of no file
	for i := uint64(2); i <= 3; i++ {
		if err := l.write(i, []*write{logWrite("r", int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if l.aio != nil || l.direct == nil {
		t.Errorf("after a refusal: asynchronous %v, direct %v; want direct writes without asynchronous I/O", l.aio != nil, l.direct != nil)
	}
	_ = l.close()
	if _, entries, err := openCommitLog(path); err != nil || len(entries) != 3 {
		t.Fatalf("reopened: %d entries, %v; want 3", len(entries), err)
	}
}
