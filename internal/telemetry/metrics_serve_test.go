package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/telemetry"
)

func TestServeMetrics(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{ServiceName: "t", Prometheus: true, Env: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	tel.RecordRun(context.Background(), "completed", 1)
	m, err := tel.ServeMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + m.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "toolmesh_run_duration_seconds") {
		t.Errorf("GET /metrics = %d\n%s", resp.StatusCode, body)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}
