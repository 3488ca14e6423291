package crash

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/failpoint"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// A run whose journal holds a damaged record (a byte of a committed row changed on
// disk) is not resumed as if the record said something else: the orchestrator holds it
// for an operator. GetRun reports it HELD, with the reason (JOURNAL_DAMAGED); the model
// is asked nothing more and no call is sent; an orchestrator that starts again tries it
// again and holds it again; CancelRun ends it, cancelled.
func TestDamagedRecordHoldsTheRun(t *testing.T) {
	if _, err := harness.Bin("orchestrator"); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	md := startModel(t)
	cfg := filepath.Join(dir, "orchestrator.yaml")
	if err := os.WriteFile(cfg, []byte(`
provider: {name: openai, openai: {base_url: `+strconv.Quote(md.url())+`, api_key: crash-key, default_model: gpt-crash, max_retries: 0}}
registry: {heartbeat_interval: 500ms, lease_ttl: 3s, grace_period: 1s, readiness_grace: 5s}
journal: {data_dir: `+strconv.Quote(data)+`, lease_ttl: 2s, resume_grace: 10s}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	o := &orchestrator{t: t, cfg: cfg, addr: addr}
	o.start(kill{failpoint.OutcomeReceived, 4}.env())
	defer o.stop()
	w, err := harness.StartWorker("worker", "worker-1", "payments,math", addr, nil, "--reconnect-min", "20ms", "--reconnect-max", "200ms")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop(10 * time.Second) }()
	if err := harness.WaitWorkers(ctx, o.client(), "worker-1"); err != nil {
		t.Fatal(err)
	}
	go func() {
		req := &toolpb.RunRequest{RunId: "damaged", Prompt: "Pay and add.", ToolGroups: []string{"payments"}, Tools: []string{"add"}, Detached: true}
		for _, err := range o.client().Run(ctx, req) {
			if err != nil {
				return
			}
		}
	}()
	if err := o.p.Wait(60 * time.Second); err == nil || !o.p.Exited() {
		t.Fatalf("the orchestrator did not die at the failpoint: %v\n%s", err, o.output())
	}

	// A byte of the run's first row changes on disk. The journal is
	// opened once first, which copies its commit log to the database: the rows are there.
	js, err := runlog.OpenSQLite(ctx, filepath.Join(data, "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	_ = js.Close()
	db, err := sql.Open("sqlite", filepath.Join(data, "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := db.Exec(`UPDATE toolmesh_records SET data = CAST(substr(data, 1, 20) || X'FF' || substr(data, 22) AS BLOB)
		WHERE run_id = 'damaged' AND seq = (SELECT seq FROM toolmesh_records WHERE run_id = 'damaged' ORDER BY seq LIMIT 1)`)
	if n, _ := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("damaging a row: %v (%d rows)", err, n)
	}
	_ = db.Close()
	asked := len(md.requests())

	for range 2 { // held, then held again by an orchestrator that starts again
		o.start("")
		var snap *toolpb.GetRunResponse
		for {
			snap, err = o.client().GetRun(ctx, "damaged")
			if err == nil && snap.GetState() == toolpb.RunState_RUN_STATE_HELD {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the run was not held: %v, %v\n%s", snap, err, o.output())
			}
			time.Sleep(100 * time.Millisecond)
		}
		if e := snap.GetError(); e.GetReason() != toolpb.ErrorReason_ERROR_REASON_JOURNAL_DAMAGED || !strings.Contains(e.GetMessage(), "checksum") {
			t.Errorf("a held run's error: %v", e)
		}
		_ = o.p.Kill()
		_ = o.p.Wait(10 * time.Second)
	}
	if n := len(md.requests()); n != asked {
		t.Errorf("the model was asked %d more times after the damage", n-asked)
	}
	o.start("")
	state, err := o.client().CancelRun(ctx, "damaged", "the operator gave up")
	if err != nil || state != toolpb.RunState_RUN_STATE_CANCELLED {
		t.Fatalf("CancelRun of a held run: %v, %v", state, err)
	}
	if snap, err := o.client().GetRun(ctx, "damaged"); err != nil || snap.GetState() != toolpb.RunState_RUN_STATE_CANCELLED {
		t.Errorf("GetRun after cancelling: %v, %v", snap, err)
	}
	if !strings.Contains(o.output(), "a run is held for an operator") {
		t.Error("the orchestrator did not log why it held the run")
	}
}
