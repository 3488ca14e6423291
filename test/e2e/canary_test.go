package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestCanarySecrets (catalogue S16): canary values planted in a run's context (a token),
// in the client's call metadata (a cookie, an authorization header), in the processes'
// environment and in a tool call's arguments appear in no log line of the orchestrator or
// the worker, in no span, and nowhere in the journal's files (its records encrypted).
func TestCanarySecrets(t *testing.T) {
	canaries := map[string]string{
		"context": "canary-ctx-9a7f21", "cookie": "canary-cookie-3c88e0", "authorization": "canary-authz-71d2aa",
		"env": "canary-env-b04f5e", "args": "canary-args-5e1c0d",
	}
	rcv, _ := startTraceCollector(t)
	t.Setenv("TOOLMESH_TEST_SECRET", canaries["env"])
	dir := t.TempDir()
	key := filepath.Join(dir, "journal.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("ab", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	m := startMesh(t, "canary.yaml", "journal: {data_dir: "+quote(data)+", encryption_key_file: "+quote(key)+"}\n"+
		"groups: {text: {context: {kind: allow-keys, keys: [auth_token]}}}\nlog: {level: DEBUG}\n")
	m.startWorker("text-1", "text", "--log-level", "debug")
	m.waitWorkers("text-1")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "cookie", "session="+canaries["cookie"], "x-api-key", canaries["authorization"])
	var final string
	var events []string
	for ev, err := range m.c.Run(ctx, &toolpb.RunRequest{Prompt: "count", Tools: []string{"word_count"}, Context: map[string]string{"auth_token": canaries["context"]}}) {
		if err != nil {
			m.dump()
			t.Fatal(err)
		}
		b, _ := protojson.Marshal(ev)
		events = append(events, string(b))
		if f := ev.GetFinalResult(); f != nil {
			final = f.GetText()
		}
	}
	if final != "counted 2" {
		t.Fatalf("final %q", final)
	}
	// The client, and only the client, sees the arguments it caused.
	if !strings.Contains(strings.Join(events, "\n"), canaries["args"]) {
		t.Error("the run's events do not carry the call's arguments: the scan below would prove nothing")
	}
	m.stop()
	time.Sleep(300 * time.Millisecond) // the last span batches

	places := map[string]string{"orchestrator log": m.orch.Output()}
	for id, w := range m.workers {
		places["worker "+id+" log"] = w.Output()
	}
	spans, _ := rcv.snapshot()
	if len(spans) == 0 {
		t.Fatal("no spans were exported: the scan below would prove nothing")
	}
	var sb strings.Builder
	for _, s := range spans {
		b, _ := protojson.Marshal(s)
		sb.Write(b)
	}
	places["spans"] = sb.String()
	for _, f := range []string{"journal.db", "journal.db-wal"} {
		b, err := os.ReadFile(filepath.Join(data, f))
		if err == nil {
			places[f] = string(b)
		}
	}
	if places["journal.db"] == "" {
		t.Fatal("no journal file")
	}
	for where, text := range places {
		for what, c := range canaries {
			if strings.Contains(text, c) {
				t.Errorf("the %s canary (%s) is in the %s", what, c, where)
			}
		}
	}
}
