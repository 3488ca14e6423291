package bench

import (
	"os"
	"path/filepath"
	"syscall"
	"time"
	"unsafe"
)

// probeSyncWrite times synchronous writes to a file in dir, as the SQLite journal's
// commit log makes them (O_DSYNC, and O_DIRECT where the file system allows it), and
// returns their median in µs.
func probeSyncWrite(dir string) (float64, error) {
	path := filepath.Join(dir, "sync-probe")
	defer func() { _ = os.Remove(path) }()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_DSYNC|syscall.O_DIRECT, 0o600)
	if err != nil {
		if f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_DSYNC, 0o600); err != nil {
			return 0, err
		}
	}
	defer func() { _ = f.Close() }()
	// Direct I/O takes a buffer aligned to the disk's blocks: a page is.
	const align = 4096
	buf := make([]byte, syncProbeBytes+align)
	off := int((align - uintptr(unsafe.Pointer(&buf[0]))%align) % align)
	b := buf[off : off+syncProbeBytes]
	for i := range b {
		b[i] = byte(i)
	}
	// The file's blocks are written once first: the timed writes overwrite them, as the
	// commit log's overwrite the zeros it grew by.
	for i := range syncProbeWrites {
		if _, err := f.WriteAt(b, int64(i)*syncProbeBytes); err != nil {
			return 0, err
		}
	}
	ds := make([]time.Duration, 0, syncProbeWrites)
	for i := range syncProbeWrites {
		start := time.Now()
		if _, err := f.WriteAt(b, int64(i)*syncProbeBytes); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(start))
	}
	return medianDuration(ds), nil
}
