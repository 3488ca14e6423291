package conformance

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestClients drives each SDK's conformance client against an orchestrator with the Go
// SDK's worker: a run's events as it streams them, the same run's events watched again
// from the journal and after a sequence number, GetRun, CancelRun, and the errors of an
// unknown run and of a bad request, all as the Go client reports them.
func TestClients(t *testing.T) {
	m := startMesh(t, lang{name: "go", worker: []string{goBuilt.worker}})
	m.startWorker("go-1")
	plan := prompt([]call{{"calc", `{}`}}, []call{{"add", `{"a":1,"b":2}`}}, []call{{"echo", `{"text":"x"}`}}, []call{{"steps", `{"n":2}`}})
	var reference map[string][]string
	for _, l := range langs(t) {
		t.Run(l.name, func(t *testing.T) {
			got := clientTranscript(t, m, l, plan)
			if os.Getenv("TOOLMESH_CONFORMANCE_VERBOSE") != "" {
				for k, v := range got {
					t.Logf("%s:\n%s", k, strings.Join(v, "\n"))
				}
			}
			if reference == nil {
				reference = got
				return
			}
			if diff := cmp.Diff(reference, got); diff != "" {
				t.Errorf("what the %s client reports (-go +%s):\n%s", l.name, l.name, diff)
			}
		})
	}
}

// clientTranscript runs the client's commands and returns what each printed,
// normalized: run ids, loop ids, times and durations replaced by placeholders.
func clientTranscript(t *testing.T, m *mesh, l lang, plan string) map[string][]string {
	t.Helper()
	runID := "client-" + l.name
	out := map[string][]string{}
	ran := clientRun(t, m, l, "run", "--group", "conf", "--run-id", runID, plan)
	loopID := loopOf(t, ran)
	out["run"] = events(t, ran, loopID)
	out["watch"] = events(t, clientRun(t, m, l, "watch", runID), loopID)
	out["watch after 3"] = events(t, clientRun(t, m, l, "watch", "--after", "3", runID), loopID)
	get := &toolpb.GetRunResponse{}
	if err := protojson.Unmarshal([]byte(clientRun(t, m, l, "get", runID)), get); err != nil {
		t.Fatalf("get printed something that is not a GetRunResponse: %v", err)
	}
	out["get"] = []string{get.GetState().String(), get.GetFinalText(), fmt.Sprint(get.GetIterations(), " ", get.GetToolCalls())}
	out["cancel"] = []string{strings.TrimSpace(clientRun(t, m, l, "cancel", runID))}
	out["get unknown"] = []string{strings.TrimSpace(clientFail(t, m, l, "get", "no-such-run"))}
	out["run with a bad id"] = []string{strings.TrimSpace(clientFail(t, m, l, "run", "--run-id", "bad id!", "hi"))}
	// A status without toolmesh's details (the transport's own): the reason is
	// UNSPECIFIED; the message is the gRPC library's, which differs by language.
	nowhere := *m
	var err error
	if nowhere.addr, err = harness.FreeAddr(); err != nil { // nothing listens there
		t.Fatal(err)
	}
	fields := strings.Fields(clientFail(t, &nowhere, l, "get", runID))
	out["unreachable"] = fields[:min(len(fields), 3)]
	return out
}

// clientRun runs the client with args and returns its stdout; it must exit 0.
func clientRun(t *testing.T, m *mesh, l lang, args ...string) string {
	t.Helper()
	stdout, stderr, err := clientExec(testContext(t), m, l, args...)
	if err != nil {
		t.Fatalf("%s client %v: %v\nstdout: %s\nstderr: %s", l.name, args, err, stdout, stderr)
	}
	return stdout
}

// clientFail runs the client with args, which must fail: exit 1 and one "error …" line.
func clientFail(t *testing.T, m *mesh, l lang, args ...string) string {
	t.Helper()
	stdout, stderr, err := clientExec(testContext(t), m, l, args...)
	var ee *exec.ExitError
	if err == nil || !errorsAs(err, &ee) || ee.ExitCode() != 1 || !strings.HasPrefix(stdout, "error ") || strings.Count(strings.TrimSpace(stdout), "\n") != 0 {
		t.Errorf("%s client %v: %v, stdout %q, stderr %s; want exit 1 and one error line", l.name, args, err, stdout, stderr)
	}
	return stdout
}

func errorsAs(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*target = e
	}
	return ok
}

func clientExec(ctx context.Context, m *mesh, l lang, args ...string) (string, string, error) {
	full := append(append(slices.Clone(l.client[1:]), "--orchestrator", m.addr), args...)
	cmd := exec.CommandContext(ctx, l.client[0], full...)
	cmd.Env = append(os.Environ(), l.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// loopOf is the loop id of a run's started event, the first line of out.
func loopOf(t *testing.T, out string) string {
	t.Helper()
	first, _, _ := strings.Cut(out, "\n")
	ev := &toolpb.RunResponse{}
	if err := protojson.Unmarshal([]byte(first), ev); err != nil || ev.GetStarted() == nil {
		t.Fatalf("the first line %q is not the started event: %v", first, err)
	}
	return ev.GetStarted().GetLoopId()
}

// events decodes each line as a RunResponse and returns it with what varies between
// runs taken out: the run id, times, durations, and the loop id.
func events(t *testing.T, out, loopID string) []string {
	t.Helper()
	var evs []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		ev := &toolpb.RunResponse{}
		if err := protojson.Unmarshal([]byte(line), ev); err != nil {
			t.Fatalf("a line that is not a RunResponse: %q: %v", line, err)
		}
		ev.RunId, ev.Time = "", nil
		if f := ev.GetToolCallFinished(); f != nil {
			f.Duration = nil
		}
		b, _ := protojson.MarshalOptions{}.Marshal(ev)
		evs = append(evs, strings.ReplaceAll(string(b), loopID, "<loop>"))
	}
	return evs
}
