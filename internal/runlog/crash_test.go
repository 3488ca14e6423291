package runlog_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/runlog/runlogtest"
)

// The child process of the crash tests: it opens the journal named by the environment,
// creates the run, and appends batches of five records for ever, printing the number of
// each batch once its append returned.
func TestMain(m *testing.M) {
	if spec := os.Getenv("TOOLMESH_RUNLOG_CHILD"); spec != "" {
		os.Exit(child(spec, os.Getenv("TOOLMESH_RUNLOG_RUN")))
	}
	os.Exit(m.Run())
}

func openSpec(ctx context.Context, spec string) (runlog.Store, error) {
	kind, where, _ := strings.Cut(spec, ":")
	if kind == "pg" {
		return runlog.OpenPostgres(ctx, where)
	}
	return runlog.OpenSQLite(ctx, where)
}

func child(spec, run string) int {
	ctx := context.Background()
	s, err := openSpec(ctx, spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	l, err := s.Create(ctx, run, "child", time.Hour)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for b := int64(0); ; b++ {
		var rs []runlog.Record
		for i := range int64(5) {
			rs = append(rs, runlog.Record{Seq: b*5 + i + 1, Kind: runlog.KindEvent, Data: json.RawMessage(fmt.Sprintf(`{"batch":%d,"i":%d}`, b, i))})
		}
		if err := s.Append(ctx, l, rs); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(b)
	}
}

// crashCycles is how many times crashTest kills its appender: 20, or
// $TOOLMESH_CRASH_CYCLES (make soak: 100).
func crashCycles(t *testing.T) int {
	if s := os.Getenv("TOOLMESH_CRASH_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("TOOLMESH_CRASH_CYCLES=%q: want a positive number", s)
		}
		return n
	}
	return 20
}

// crashTest SIGKILLs an appending process mid-append (it appends as fast as commits
// allow, a few hundred a second), many times: every batch the child acknowledged is in
// the journal, the journal holds whole batches only, in order, without gaps, the run's
// row agrees with its records, and (SQLite) the file passes its integrity check.
func crashTest(t *testing.T, spec string) {
	cycles := crashCycles(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cycles)*10*time.Second)
	defer cancel()
	for cycle := range cycles {
		run := fmt.Sprintf("crash-%d", cycle)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "TOOLMESH_RUNLOG_CHILD="+spec, "TOOLMESH_RUNLOG_RUN="+run)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		acked := int64(-1)
		for sc.Scan() {
			n, _ := strconv.ParseInt(sc.Text(), 10, 64)
			acked = n
			if n >= int64(5+cycle*7%40) {
				break
			}
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		for sc.Scan() { // what it printed before it died was acknowledged too
			if n, err := strconv.ParseInt(sc.Text(), 10, 64); err == nil {
				acked = n
			}
		}
		_ = cmd.Wait()
		if acked < 0 {
			t.Fatalf("cycle %d: the child acknowledged nothing: %s", cycle, stderr.String())
		}
		s, err := openSpec(ctx, spec)
		if err != nil {
			t.Fatalf("cycle %d: reopening after the crash: %v", cycle, err)
		}
		all, err := s.Read(ctx, run, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := s.Get(ctx, run); err != nil || r.Records != int64(len(all)) {
			t.Errorf("cycle %d: the run's row says %d records, the journal holds %d (%v)", cycle, r.Records, len(all), err)
		}
		_ = s.Close()
		if path, ok := strings.CutPrefix(spec, "sqlite:"); ok {
			db := runlogtest.RawSQLite(t, path)
			var verdict string
			if err := db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&verdict); err != nil || verdict != "ok" {
				t.Errorf("cycle %d: integrity_check = %q, %v", cycle, verdict, err)
			}
			_ = db.Close()
		}
		if int64(len(all)) < (acked+1)*5 {
			t.Errorf("cycle %d: %d records, but %d batches were acknowledged", cycle, len(all), acked+1)
		}
		if len(all)%5 != 0 {
			t.Errorf("cycle %d: %d records: a batch is in part", cycle, len(all))
		}
		for i, r := range all {
			var d struct{ Batch, I int64 }
			if err := json.Unmarshal(r.Data, &d); err != nil || r.Seq != int64(i+1) || d.Batch*5+d.I+1 != r.Seq {
				t.Fatalf("cycle %d: record %d is %d %s", cycle, i, r.Seq, r.Data)
			}
		}
	}
}

func TestSQLiteSurvivesCrashes(t *testing.T) {
	crashTest(t, "sqlite:"+filepath.Join(t.TempDir(), "journal.db"))
}
