package run

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolmesh/toolmesh/internal/runlog"
)

// A write the store keeps failing, while the lease's renewals pass, stops the run
// within a lease's time of its first failure: the retries went on for as long as the
// lease lasted, and the renewals kept moving its end. Here the commit log cannot grow
// (a file size limit) for a record of MaxRecordBytes, and the renewals, small updates of
// the database, pass.
func TestFailingWriteStopsWithinTheLease(t *testing.T) {
	ctx := context.Background()
	store, err := runlog.OpenSQLite(ctx, filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	lease, err := store.Create(ctx, "r1", "me", ttl, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 8 << 20, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Setrlimit(unix.RLIMIT_FSIZE, &old) }()
	j := newJournal(store, newRenewer(ttl), lease, ttl, jsonCodec{}, 2)
	j.setStop(func(error) {})
	j.start()
	big := bytes.Repeat([]byte("x"), runlog.MaxRecordBytes)
	out := make(chan error, 1)
	start := time.Now()
	go func() { _, err := j.add(runlog.KindModel, big, nil, true); out <- err }()
	select {
	case err := <-out:
		if err == nil {
			t.Fatal("a write over the file size limit passed")
		}
		if took := time.Since(start); took > ttl+time.Second {
			t.Errorf("the write failed after %v; want within the lease's %v", took, ttl)
		}
		_ = j.close()
		_ = store.Close()
	case <-time.After(8 * ttl):
		// The journal and its store are left as they are: closing them waits for the
		// write that still retries.
		t.Errorf("the write still retries %v later, with a lease of %v", time.Since(start).Round(time.Millisecond), ttl)
	}
}
