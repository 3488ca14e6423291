//go:build !linux

package runlog

import "os"

// syncWrites: each write of the commit log is followed by a sync (see sync).
const syncWrites = 0

// directWrites: the log is written through the page cache.
const directWrites = 0

// syncData makes f's written data durable.
func syncData(f *os.File) error { return f.Sync() }
