package arch

// This file proves that a worker author's binary links the OpenTelemetry API only: the
// worker SDK and the smallest worker program (testdata/helloworker) depend on no SDK,
// exporter, Prometheus client or autoexport. Those come with pkg/otelsetup, which a
// worker's main imports when it wants telemetry.

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// sdkOnly are the import path prefixes that only pkg/otelsetup (and the binaries that
// use it) may link.
var sdkOnly = []string{
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters/",
	"go.opentelemetry.io/contrib/exporters/autoexport",
	"github.com/prometheus/",
	"github.com/toolmesh/toolmesh/pkg/otelsetup",
}

// deps is `go list -deps` of pkg: every package it links, standard library included.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-deps", pkg).Output()
	if err != nil {
		var stderr string
		if e, ok := err.(*exec.ExitError); ok {
			stderr = string(e.Stderr)
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	return strings.Fields(string(out))
}

func TestWorkerLinksNoSDK(t *testing.T) {
	for _, pkg := range []string{
		"github.com/toolmesh/toolmesh/internal/telemetry",
		"github.com/toolmesh/toolmesh/pkg/worker",
		"github.com/toolmesh/toolmesh/pkg/client",
		"./testdata/helloworker",
	} {
		all := deps(t, pkg)
		if !slices.Contains(all, "go.opentelemetry.io/otel/trace") && pkg != "github.com/toolmesh/toolmesh/pkg/client" {
			t.Errorf("%s does not link the OpenTelemetry API: the listing is broken", pkg)
		}
		for _, d := range all {
			for _, prefix := range sdkOnly {
				if strings.HasPrefix(d, prefix) {
					t.Errorf("%s links %s: only pkg/otelsetup may bring in the SDK, exporters, Prometheus or autoexport", pkg, d)
				}
			}
		}
	}
}

// The rule above has teeth: the setup package does link what the worker must not.
func TestOtelsetupLinksTheSDK(t *testing.T) {
	all := deps(t, "github.com/toolmesh/toolmesh/pkg/otelsetup")
	for _, want := range []string{
		"go.opentelemetry.io/otel/sdk/trace",
		"go.opentelemetry.io/otel/sdk/metric",
		"go.opentelemetry.io/contrib/exporters/autoexport",
		"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp",
		"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc",
		"go.opentelemetry.io/otel/exporters/stdout/stdouttrace",
		"github.com/prometheus/client_golang/prometheus",
	} {
		if !slices.Contains(all, want) {
			t.Errorf("pkg/otelsetup does not link %s", want)
		}
	}
}
