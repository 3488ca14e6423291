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

// crashTest SIGKILLs an appending process mid-append, several times: every batch the
// child acknowledged is in the journal, and the journal holds whole batches only, in
// order, without gaps.
func crashTest(t *testing.T, spec string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for cycle := range 3 {
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
			if n >= int64(20+cycle*7) {
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
		_ = s.Close()
		if err != nil {
			t.Fatal(err)
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
