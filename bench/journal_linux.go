package bench

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"
	"unsafe"
)

// probeWrites times syncProbeWrites writes of syncProbeBytes to a new file in dir
// opened with O_DSYNC and extra (O_DIRECT, or nothing where the file system refuses it
// at open), and returns their median in µs: back to back, and each after the disk was
// left idle for syncProbeIdle.
func probeWrites(dir string, extra int) (backToBack, afterIdle float64, err error) {
	path := filepath.Join(dir, "sync-probe")
	defer func() { _ = os.Remove(path) }()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|syscall.O_DSYNC|extra, 0o600)
	if err != nil && extra != 0 {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|syscall.O_DSYNC, 0o600)
	}
	if err != nil {
		return 0, 0, err
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
			return 0, 0, err
		}
	}
	times := func(idle time.Duration) (float64, error) {
		ds := make([]time.Duration, 0, syncProbeWrites)
		for i := range syncProbeWrites {
			if idle > 0 {
				time.Sleep(idle)
			}
			start := time.Now()
			if _, err := f.WriteAt(b, int64(i)*syncProbeBytes); err != nil {
				return 0, err
			}
			ds = append(ds, time.Since(start))
		}
		return medianDuration(ds), nil
	}
	if backToBack, err = times(0); err != nil {
		return 0, 0, err
	}
	afterIdle, err = times(syncProbeIdle)
	return backToBack, afterIdle, err
}

// probeSyncWrite times synchronous writes to a file in dir, as the SQLite journal's
// commit log makes them: with O_DSYNC, and O_DIRECT where the file system allows it (and
// without where it refuses a write, as the log does); the medians in µs, back to back
// and after the disk was idle (probeWrites).
func probeSyncWrite(dir string) (backToBack, afterIdle float64, err error) {
	backToBack, afterIdle, err = probeWrites(dir, syscall.O_DIRECT)
	if errors.Is(err, syscall.EINVAL) {
		return probeWrites(dir, 0)
	}
	return backToBack, afterIdle, err
}
