package config

import (
	"fmt"

	"github.com/toolmesh/toolmesh/internal/ctxconv"
)

// Telemetry configures what the orchestrator exports. Exporters themselves are chosen by
// the standard OTEL_* environment variables.
type Telemetry struct {
	// MetricsListen, when set, serves Prometheus metrics at /metrics on this address.
	MetricsListen string `yaml:"metrics_listen"`
	// CapturePayloads records tool arguments and results on spans. Off by default: they
	// may hold personal data.
	CapturePayloads bool `yaml:"capture_payloads"`
	// ContextAllowList names the ToolCallContext keys whose values may appear on spans;
	// no other key ever does.
	ContextAllowList []string `yaml:"context_allow_list"`
}

func (c Config) validateTelemetry(bad func(key, format string, args ...any)) {
	if c.Telemetry.MetricsListen != "" {
		if err := checkListen(c.Telemetry.MetricsListen); err != nil {
			bad("telemetry.metrics_listen", "%v", err)
		}
	}
	for i, k := range c.Telemetry.ContextAllowList {
		checkKey(bad, fmt.Sprintf("telemetry.context_allow_list[%d]", i), k)
	}
	for _, k := range c.Telemetry.ContextAllowList {
		switch {
		case ctxconv.IsCredentialKey(k):
			bad("telemetry.context_allow_list", "names %q, a well-known credential key: credentials never go on spans", k)
		case ctxconv.IsSecretKey(k, c.Context.Secrets...): // however the list spells it
			bad("telemetry.context_allow_list", "names the secret key %q: secrets never go on spans", k)
		}
	}
}
