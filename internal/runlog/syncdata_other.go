//go:build !linux

package runlog

import "os"

// syncWrites: each write of the commit log is followed by a sync (see sync).
const syncWrites = 0

// syncData makes f's written data durable.
func syncData(f *os.File) error { return f.Sync() }
