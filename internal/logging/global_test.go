package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"google.golang.org/grpc/grpclog"
)

// TestCaptureWritesOneFormat: after Capture, what grpc-go and the OpenTelemetry SDK log
// on their own arrives as JSON lines of the binary's logger.
func TestCaptureWritesOneFormat(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	Capture(log)
	otel.Handle(errors.New("exporter cannot reach collector:4318"))
	grpclog.Warningf("transport: %s", "connection reset")
	grpclog.Infoln("chatty info")

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", l, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2 (info is debug): %s", len(lines), buf.String())
	}
	if lines[0]["component"] != "otel" || lines[0]["level"] != "WARN" || !strings.Contains(lines[0]["error"].(string), "collector") {
		t.Errorf("otel line = %v", lines[0])
	}
	if lines[1]["component"] != "grpc" || lines[1]["level"] != "WARN" || lines[1]["msg"] != "transport: connection reset" {
		t.Errorf("grpc line = %v", lines[1])
	}
}
