package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestCanarySecrets (catalogue S16): canary values planted in a run's context (a token),
// in the client's credentials (its bearer JWT) and call metadata (a cookie, an API key),
// in the processes' environment (the OTLP exporter's header, which both processes read
// and send to the collector, and a variable nobody reads) and in a tool call's arguments
// appear in no log line of the orchestrator or the worker, in no span, in no metric, and
// nowhere in the journal's files (its records encrypted).
func TestCanarySecrets(t *testing.T) {
	canaries := map[string]string{
		"context": "canary-ctx-9a7f21", "cookie": "canary-cookie-3c88e0", "api key": "canary-apikey-71d2aa",
		"env": "canary-env-b04f5e", "exporter header": "canary-otlp-6b19c2", "args": "canary-args-5e1c0d",
	}
	rcv, _ := startTraceCollector(t)
	t.Setenv("TOOLMESH_TEST_SECRET", canaries["env"])
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key="+canaries["exporter header"])
	sign := newSigner(t, "k1")
	token := sign.tenantToken(t, "acme")
	canaries["bearer token"] = token
	dir := t.TempDir()
	key := filepath.Join(dir, "journal.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("ab", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	m := startMesh(t, "canary.yaml", "journal: {data_dir: "+quote(data)+", encryption_key_file: "+quote(key)+"}\n"+
		"groups: {text: {context: {kind: allow-keys, keys: [auth_token]}}}\nlog: {level: DEBUG}\n"+
		"telemetry: {metrics_listen: '127.0.0.1:0'}\n"+
		"auth:\n  jwt: {jwks_file: "+quote(sign.jwks)+", issuer: \"https://issuer.test\", audience: toolmesh}\n"+
		"tenants: {acme: {groups: [text]}}\n")
	w := m.startWorker("text-1", "text", "--log-level", "debug", "--metrics-listen", "127.0.0.1:0")
	c, err := client.Dial(m.orch.Addr, insecure.NewCredentials(), client.Bearer(token, true))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitWorkerCount(ctx, t, c, 1)

	ctx = metadata.AppendToOutgoingContext(ctx, "cookie", "session="+canaries["cookie"], "x-api-key", canaries["api key"])
	var final string
	var events []string
	for ev, err := range c.Run(ctx, &toolpb.RunRequest{Prompt: "count", Tools: []string{"word_count"}, Context: map[string]string{"auth_token": canaries["context"]}}) {
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
	places := map[string]string{"orchestrator metrics": scrape(t, m.orch.Proc), "worker metrics": scrape(t, w)}
	if !strings.Contains(places["orchestrator metrics"], "toolmesh_tool_call_duration_seconds_count") || !strings.Contains(places["worker metrics"], "toolmesh_tool_call_duration_seconds_count") {
		t.Error("the metrics do not count the call: the scan below would prove little")
	}
	m.stop()
	time.Sleep(300 * time.Millisecond) // the last span batches

	places["orchestrator log"] = m.orch.Output()
	for id, w := range m.workers {
		places["worker "+id+" log"] = w.Output()
	}
	spans, _ := rcv.snapshot()
	if len(spans) == 0 {
		t.Fatal("no spans were exported: the scan below would prove nothing")
	}
	rcv.mu.Lock()
	sent := rcv.md.Get("x-collector-key")
	rcv.mu.Unlock()
	if len(sent) == 0 || sent[0] != canaries["exporter header"] {
		t.Errorf("the collector received x-collector-key %q: the processes did not read the exporter's header from their environment", sent)
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
