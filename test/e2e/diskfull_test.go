//go:build linux

package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestJournalDiskFull: the orchestrator's journal may not be written (RLIMIT_FSIZE set on
// the running process, as a full disk does). Runs that cannot be journaled end with a
// clear UNAVAILABLE error that says why; the orchestrator keeps serving what it can (the
// finished runs' records); once the disk has room again, new runs succeed, the runs cut
// short are resumed and finish, and every run acknowledged before is still there,
// finished, in a journal that passes SQLite's integrity check.
func TestJournalDiskFull(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	m := startMesh(t, "readiness.yaml", "journal: {data_dir: "+quote(dataDir)+", lease_ttl: 2s}\n")
	w := m.startWorker("pay-1", "payments", "--reconnect-min", "50ms", "--reconnect-max", "200ms")
	m.waitWorkers("pay-1")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	db := filepath.Join(dataDir, "journal.db")

	d := &diskFullState{m: m, ctx: ctx, started: map[string]bool{}}
	var acked []string
	for i := range 3 {
		id := fmt.Sprintf("before-%d", i)
		if _, err := d.run(id); err != nil {
			t.Fatalf("run %s: %v", id, err)
		}
		acked = append(acked, id)
	}

	// A run in progress when the disk fills: its records after the start cannot be
	// written, so it stops here (its stream ends UNAVAILABLE) and is resumed later.
	midErr := d.startMidRun(t)
	full := d.fillDisk(t, acked, midErr)
	d.checkDiskHasRoom(t, acked, full)
	// The credit of the run cut short took effect once, resent or not.
	n := 0
	for _, l := range w.Lines() {
		if strings.Contains(l, examplegroups.EffectLog) && hasTool(l, "credit") && strings.Contains(l, "idempotency_key=mid/") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("run mid's credit took effect %d times, want once", n)
	}
	_ = m.orch.Stop(10 * time.Second)
	checkIntegrity(t, db)
}

// diskFullState is what the phases of TestJournalDiskFull share: the mesh, the test's
// context and the runs seen started.
type diskFullState struct {
	m       *mesh
	ctx     context.Context
	started map[string]bool
}

// run runs a credit run to its end, noting whether it started, and returns its final
// text.
func (d *diskFullState) run(id string) (string, error) {
	var final string
	for ev, err := range d.m.c.Run(d.ctx, &toolpb.RunRequest{RunId: id, Prompt: "credit", ToolGroups: []string{"payments"}}) {
		if err != nil {
			return "", err
		}
		if ev.GetStarted() != nil {
			d.started[id] = true
		}
		if f := ev.GetFinalResult(); f != nil {
			final = f.GetText()
		}
	}
	return final, nil
}

// startMidRun starts run mid in the background, waits until it has started, and
// returns the channel its stream's end is sent on.
func (d *diskFullState) startMidRun(t *testing.T) <-chan error {
	t.Helper()
	midErr := make(chan error, 1)
	midStarted := make(chan struct{})
	go func() {
		var once bool
		for ev, err := range d.m.c.Run(d.ctx, &toolpb.RunRequest{RunId: "mid", Prompt: "credit", ToolGroups: []string{"payments"}}) {
			if err != nil {
				midErr <- err
				return
			}
			if ev.GetStarted() != nil && !once {
				once = true
				close(midStarted)
			}
		}
		midErr <- nil
	}()
	select {
	case <-midStarted:
	case err := <-midErr:
		t.Fatalf("run mid ended before it started: %v", err)
	}
	return midErr
}

// fillDisk forbids the orchestrator to write any file and checks that run mid stops,
// that a new run is refused and that finished runs are still served; it returns the
// runs cut short or refused.
func (d *diskFullState) fillDisk(t *testing.T, acked []string, midErr <-chan error) []string {
	t.Helper()
	m := d.m
	// The runs acknowledged so far are in the database (a read waits for that), which
	// serves them while the disk is full.
	for _, id := range acked {
		if _, err := m.c.GetRun(d.ctx, id); err != nil {
			t.Fatalf("GetRun(%s): %v", id, err)
		}
	}
	// No file of the process may be written any more. (A disk that fills up still lets
	// the journal write its commit log, whose room is taken ahead in zeros, until the log
	// must grow or the database take what it holds; here nothing may be written.)
	setFileLimit(t, m.orch.PID(), 0)
	if err := <-midErr; status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "could not be written") {
		m.dump()
		t.Errorf("run mid, whose journal filled up: %v; want UNAVAILABLE saying the journal could not be written", err)
	}

	// A new run is refused at its start.
	full := []string{"full"}
	_, fullErr := d.run("full")
	if fullErr == nil {
		t.Fatal("a run was journaled where no file may be written")
	}
	if st := status.Convert(fullErr); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "full") {
		t.Errorf("a run on a full disk ended %v %q; want UNAVAILABLE saying the disk is full", st.Code(), st.Message())
	}
	full = append(full, "mid")
	d.started["mid"] = true
	// The orchestrator serves what it has: a finished run's record.
	if r, err := m.c.GetRun(d.ctx, acked[0]); err != nil || r.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED {
		t.Errorf("GetRun(%s) on a full disk: %v, %v", acked[0], r.GetState(), err)
	}
	return full
}

// checkDiskHasRoom lifts the limit and checks that new runs succeed, that the runs cut
// short finish, that refused runs left nothing and that every acknowledged run is
// still there.
func (d *diskFullState) checkDiskHasRoom(t *testing.T, acked, full []string) {
	t.Helper()
	m := d.m
	// Room again: new runs succeed, and the run cut short is taken over (its lease
	// expired) and finishes.
	setFileLimit(t, m.orch.PID(), unix.RLIM_INFINITY)
	if text, err := d.run("after"); err != nil || !strings.Contains(text, "credited 100 cents") {
		t.Fatalf("a run once the disk has room: %q, %v", text, err)
	}
	for _, id := range full {
		if !d.started[id] {
			// Refused before it started: the journal holds nothing of it.
			if _, err := m.c.GetRun(d.ctx, id); status.Code(err) != codes.NotFound {
				t.Errorf("GetRun(%s), a run refused at its start: %v, want NotFound", id, err)
			}
			continue
		}
		if text := finalText(t, m.watch(d.ctx, id)); !strings.Contains(text, "credited 100 cents") {
			t.Errorf("run %s, cut short by the full disk, ended with %q", id, text)
		}
	}
	for _, id := range append(acked, "after") {
		if r, err := m.c.GetRun(d.ctx, id); err != nil || r.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED {
			t.Errorf("GetRun(%s) after the disk had room: %v, %v", id, r.GetState(), err)
		}
	}
}

// setFileLimit sets the RLIMIT_FSIZE of process pid.
func setFileLimit(t *testing.T, pid int, limit uint64) {
	t.Helper()
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: limit, Max: unix.RLIM_INFINITY}, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
}

// checkIntegrity runs SQLite's integrity check on the journal at path.
func checkIntegrity(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	var res string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&res); err != nil || res != "ok" {
		t.Errorf("integrity check: %q, %v", res, err)
	}
}
