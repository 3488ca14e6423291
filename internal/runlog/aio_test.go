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
	// A buffer the device cannot take directly (not block-aligned in length): refused,
	// as a write system call refuses it.
	if _, err := a.writeAt(buf[:100], 0); err == nil || !errorsIsAny(err, syscall.EINVAL, errNoAsyncIO) {
		t.Errorf("a write of 100 bytes: %v; want EINVAL, at the start or at the end", err)
	}
	if n, err := a.writeAt(buf[:logBlock], 0); err != nil || n != logBlock {
		t.Errorf("a write after a refused one: %d, %v", n, err)
	}
}

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
