package telemetry

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ErrInvalidEnv is what every configuration error wraps; errors.As with *EnvError tells
// which variable was wrong.
var ErrInvalidEnv = errors.New("invalid telemetry configuration")

// EnvError names an environment variable whose value cannot be used.
type EnvError struct {
	Var    string
	Value  string
	Reason string
}

func (e *EnvError) Error() string {
	return fmt.Sprintf("%s=%q: %s", e.Var, e.Value, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidEnv) hold.
func (e *EnvError) Unwrap() error { return ErrInvalidEnv }

// Protocols of the OTLP exporters (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
)

// envConfig is everything Setup reads from the environment. The OTLP exporters and the
// SDK read a few more variables themselves (certificates, OTEL_BSP_*, span limits).
type envConfig struct {
	disabled       bool
	traceExporters []string // otlp, console
	metricExporter []string // otlp, prometheus, console
	traceOTLP      otlpEnv
	metricOTLP     otlpEnv
	serviceName    string
	resource       []attribute.KeyValue
	sampler        sdktrace.Sampler
	samplerName    string
	metricInterval time.Duration // 0: SDK default
	metricTimeout  time.Duration // 0: SDK default
	propagators    string        // OTEL_PROPAGATORS when it asks for more than tracecontext
}

// otlpEnv is the OTLP exporter configuration of one signal, with the signal-specific
// variables already preferred over the general ones.
type otlpEnv struct {
	protocol    string
	endpoint    string // full URL for the exporter's WithEndpointURL; empty: exporter default
	insecure    bool
	headers     map[string]string
	timeout     time.Duration // 0: exporter default
	compression string        // "", "gzip" or "none"
}

// envReader collects every bad variable instead of stopping at the first, so that one
// start-up tells the operator everything to fix.
type envReader struct {
	get  func(string) string
	errs []error
	seen map[string]bool
}

func (r *envReader) fail(name, value, format string, args ...any) {
	if r.seen[name] {
		return
	}
	r.seen[name] = true
	r.errs = append(r.errs, &EnvError{Var: name, Value: value, Reason: fmt.Sprintf(format, args...)})
}

func (r *envReader) str(name string) string { return strings.TrimSpace(r.get(name)) }

// first returns the first of the variables that is set, and its name.
func (r *envReader) first(names ...string) (string, string) {
	for _, n := range names {
		if v := r.str(n); v != "" {
			return n, v
		}
	}
	return names[len(names)-1], ""
}

func (r *envReader) boolean(name string) bool {
	v := r.str(name)
	switch strings.ToLower(v) {
	case "":
		return false
	case "true":
		return true
	case "false":
		return false
	}
	r.fail(name, v, "must be true or false")
	return false
}

func (r *envReader) millis(name string) time.Duration {
	v := r.str(name)
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		r.fail(name, v, "must be a positive whole number of milliseconds")
		return 0
	}
	return time.Duration(n) * time.Millisecond
}

// list parses a comma-separated list of case-insensitive names from allowed. "none"
// alone means the empty list.
func (r *envReader) list(name, def string, allowed ...string) []string {
	v := r.str(name)
	if v == "" {
		v = def
	}
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		item = strings.ToLower(strings.TrimSpace(item))
		switch {
		case item == "none":
			if strings.Contains(v, ",") {
				r.fail(name, v, "none cannot be combined with other exporters")
				return nil
			}
			return nil
		case slices.Contains(allowed, item):
			if !slices.Contains(out, item) {
				out = append(out, item)
			}
		default:
			r.fail(name, v, "unknown exporter %q: must be a comma-separated list of %s, or none", item, strings.Join(allowed, ", "))
			return nil
		}
	}
	return out
}

// keyValues parses the k=v,k=v form (values percent-encoded) of OTEL_RESOURCE_ATTRIBUTES
// and OTEL_EXPORTER_OTLP_HEADERS.
func (r *envReader) keyValues(name string) map[string]string {
	v := r.str(name)
	if v == "" {
		return nil
	}
	out := map[string]string{}
	for pair := range strings.SplitSeq(v, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, val, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			r.fail(name, v, "entry %q is not key=value", pair)
			return nil
		}
		dec, err := url.PathUnescape(strings.TrimSpace(val))
		if err != nil {
			r.fail(name, v, "value of %q is not percent-encoded correctly", k)
			return nil
		}
		out[k] = dec
	}
	return out
}

// parseEnv reads the configuration. prometheus says whether the metrics exporter defaults
// to prometheus (Options.Prometheus) instead of none.
func parseEnv(get func(string) string, prometheus bool) (envConfig, error) {
	r := &envReader{get: get, seen: map[string]bool{}}
	var c envConfig
	c.disabled = r.boolean("OTEL_SDK_DISABLED")
	if c.disabled {
		return c, errors.Join(r.errs...)
	}

	c.traceExporters = r.list("OTEL_TRACES_EXPORTER", "none", "otlp", "console")
	metricsDefault := "none"
	if prometheus {
		metricsDefault = "prometheus"
	}
	c.metricExporter = r.list("OTEL_METRICS_EXPORTER", metricsDefault, "otlp", "prometheus", "console")
	if slices.Contains(c.traceExporters, "otlp") {
		c.traceOTLP = r.otlp("TRACES", "/v1/traces")
	}
	if slices.Contains(c.metricExporter, "otlp") {
		c.metricOTLP = r.otlp("METRICS", "/v1/metrics")
		if c.metricOTLP.protocol != ProtocolGRPC {
			n, v := r.first("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
			r.fail(n, v, "OTLP metrics are exported over grpc only; set grpc, or scrape /metrics with OTEL_METRICS_EXPORTER=prometheus")
		}
	}
	if slices.Contains(c.metricExporter, "otlp") || slices.Contains(c.metricExporter, "console") {
		c.metricInterval = r.millis("OTEL_METRIC_EXPORT_INTERVAL")
		c.metricTimeout = r.millis("OTEL_METRIC_EXPORT_TIMEOUT")
	}

	c.serviceName = r.str("OTEL_SERVICE_NAME")
	attrs := r.keyValues("OTEL_RESOURCE_ATTRIBUTES")
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		c.resource = append(c.resource, attribute.String(k, attrs[k]))
	}
	c.sampler, c.samplerName = r.sampler()

	if p := r.str("OTEL_PROPAGATORS"); p != "" && strings.ToLower(p) != "tracecontext" {
		c.propagators = p
	}
	return c, errors.Join(r.errs...)
}

// otlp reads the exporter variables of one signal ("TRACES" or "METRICS"); signalPath is
// what OTLP/HTTP appends to the general endpoint.
func (r *envReader) otlp(signal, signalPath string) otlpEnv {
	var o otlpEnv
	pn, pv := r.first("OTEL_EXPORTER_OTLP_"+signal+"_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	switch strings.ToLower(pv) {
	case "", ProtocolGRPC:
		// grpc, not the specification's http/protobuf, is the default: toolmesh speaks
		// gRPC everywhere and exports metrics over gRPC only.
		o.protocol = ProtocolGRPC
	case ProtocolHTTPProtobuf:
		o.protocol = ProtocolHTTPProtobuf
	default:
		r.fail(pn, pv, "must be grpc or http/protobuf")
		o.protocol = ProtocolGRPC
	}

	sigName := "OTEL_EXPORTER_OTLP_" + signal + "_ENDPOINT"
	if v := r.str(sigName); v != "" {
		// A signal-specific URL is used as it is.
		if u := r.endpoint(sigName, v); u != nil {
			o.endpoint = u.String()
		}
	} else if v := r.str("OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		if u := r.endpoint("OTEL_EXPORTER_OTLP_ENDPOINT", v); u != nil {
			if o.protocol == ProtocolHTTPProtobuf {
				// The general URL is a base: each signal goes to its own path under it.
				u.Path = path.Join("/", u.Path, signalPath)
			}
			o.endpoint = u.String()
		}
	}

	in, iv := r.first("OTEL_EXPORTER_OTLP_"+signal+"_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE")
	if iv != "" {
		o.insecure = r.boolean(in)
	}
	hn, _ := r.first("OTEL_EXPORTER_OTLP_"+signal+"_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
	o.headers = r.keyValues(hn)
	tn, _ := r.first("OTEL_EXPORTER_OTLP_"+signal+"_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
	o.timeout = r.millis(tn)
	cn, cv := r.first("OTEL_EXPORTER_OTLP_"+signal+"_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION")
	switch strings.ToLower(cv) {
	case "", "gzip", "none":
		o.compression = strings.ToLower(cv)
	default:
		r.fail(cn, cv, "must be gzip or none")
	}
	return o
}

func (r *envReader) endpoint(name, v string) *url.URL {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.fail(name, v, "must be a URL such as http://collector:4317 (scheme http or https, and a host)")
		return nil
	}
	return u
}

// sampler reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG.
func (r *envReader) sampler() (sdktrace.Sampler, string) {
	name := strings.ToLower(r.str("OTEL_TRACES_SAMPLER"))
	if name == "" {
		name = "parentbased_always_on"
	}
	ratio := func() float64 {
		v := r.str("OTEL_TRACES_SAMPLER_ARG")
		if v == "" {
			return 1
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > 1 {
			r.fail("OTEL_TRACES_SAMPLER_ARG", v, "must be a sampling ratio between 0 and 1")
			return 1
		}
		return f
	}
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample(), name
	case "always_off":
		return sdktrace.NeverSample(), name
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio()), name
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), name
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), name
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio())), name
	}
	r.fail("OTEL_TRACES_SAMPLER", r.str("OTEL_TRACES_SAMPLER"), "must be always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio")
	return sdktrace.ParentBased(sdktrace.AlwaysSample()), "parentbased_always_on"
}
