package e2e

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// command runs a toolmesh binary to its end with the environment of the test minus any
// OTEL_* variable, plus env, and returns its stdout, stderr and exit code. The deadline
// is far longer than any of these commands needs: hitting it fails the test.
func command(t *testing.T, name string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin, err := harness.Bin(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %q did not finish within 30s\nstdout:\n%s\nstderr:\n%s", name, args, out.String(), errOut.String())
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("%s %q: %v", name, args, err)
	}
	return out.String(), errOut.String(), code
}

// Asking a binary for help is not an error: the usage goes to stdout and the exit status
// is 0. A flag it does not know is one: usage on stderr, non-zero exit.
func TestHelpExitsZero(t *testing.T) {
	for _, name := range []string{"orchestrator", "toolworker", "toolmesh", "toolmesh-demo"} {
		for _, flag := range []string{"-h", "--help"} {
			stdout, stderr, code := command(t, name, nil, flag)
			if code != 0 || !strings.HasPrefix(stdout, "usage: "+name) || stderr != "" {
				t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want exit 0 and the usage on stdout only", name, flag, code, stdout, stderr)
			}
		}
		stdout, stderr, code := command(t, name, nil, "--no-such-flag")
		if code == 0 || stdout != "" || !strings.Contains(stderr, "flag provided but not defined: -no-such-flag") || !strings.Contains(stderr, "usage: "+name) {
			t.Errorf("%s --no-such-flag: exit %d, stdout %q, stderr %q; want a failure with the error and the usage on stderr", name, code, stdout, stderr)
		}
	}
	// Each command of the CLI has its own help; run's documents how to choose the model.
	stdout, _, code := command(t, "toolmesh", nil, "run", "-h")
	if code != 0 || !strings.HasPrefix(stdout, "usage: toolmesh run ") || !strings.Contains(stdout, "llm.model") || !strings.Contains(stdout, "llm.role") {
		t.Errorf("toolmesh run -h: exit %d, stdout:\n%s", code, stdout)
	}
	if stdout, _, _ := command(t, "toolmesh-demo", nil, "-h"); strings.Contains(stdout, "orchestrator  pid") {
		t.Errorf("toolmesh-demo -h started the demo:\n%s", stdout)
	}
}

// With OTEL_TRACES_EXPORTER=console the CLI's spans go to stderr: stdout holds exactly
// the events, one JSON object a line with -json.
func TestCLIConsoleSpansOnStderr(t *testing.T) {
	m := startMesh(t, "onecall.yaml")
	m.startWorker("math-1", "math")
	m.waitWorkers("math-1")

	stdout, stderr, code := command(t, "toolmesh", []string{"OTEL_TRACES_EXPORTER=console", "OTEL_METRICS_EXPORTER=console"},
		"-addr", m.orch.Addr, "run", "-json", "-tool", "add", "What is 40 + 2?")
	if code != 0 {
		t.Fatalf("toolmesh run: exit %d\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	for i, l := range lines {
		var ev toolpb.RunResponse
		if err := protojson.Unmarshal([]byte(l), &ev); err != nil {
			t.Errorf("stdout line %d is not an event: %q (%v)", i+1, l, err)
		}
		if i == len(lines)-1 && ev.GetFinalResult().GetText() != "the answer is 42" {
			t.Errorf("last line %q, want the final result", l)
		}
	}
	if !strings.Contains(stderr, `"Name":"toolmesh.v1.OrchestratorService/Run"`) {
		t.Errorf("the CLI's span of its Run call is not on stderr:\n%s", stderr)
	}
}

// A collector that cannot be reached costs the CLI at most its bounded flush and a
// warning, not the exporter's minute of retries (OTEL_EXPORTER_OTLP_TIMEOUT allows ten):
// the command finishes well within the deadline of command, prints its output and exits
// 0. Over HTTP the refused connection fails the export at once; over gRPC the exporter
// retries UNAVAILABLE until the flush deadline cuts it off.
func TestCLIUnreachableCollector(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "onecall.yaml")

	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			stdout, stderr, code := command(t, "toolmesh", []string{
				"OTEL_TRACES_EXPORTER=otlp",
				"OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
				"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + closed,
				"OTEL_EXPORTER_OTLP_INSECURE=true",
				"OTEL_EXPORTER_OTLP_TIMEOUT=600000",
				"OTEL_BSP_EXPORT_TIMEOUT=600000",
			}, "-addr", m.orch.Addr, "groups")
			if code != 0 || !strings.HasPrefix(stdout, "GROUP") {
				t.Errorf("toolmesh groups: exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			warning := "toolmesh: warning: telemetry not exported within 1s: "
			if i := strings.Index(stderr, warning); i < 0 || !strings.Contains(stderr[i:], "span") {
				t.Errorf("no warning that the spans were not exported; stderr:\n%s", stderr)
			}
		})
	}
}
