package telemetry

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names. The gen_ai.* ones are the GenAI semantic conventions' (v1.41.0), with
// their units and advised buckets; the rest are toolmesh's. In Prometheus exposition the
// dots become underscores and units become suffixes: toolmesh_tool_call_duration_seconds,
// toolmesh_worker_calls_in_flight, toolmesh_orchestrator_calls_in_flight,
// toolmesh_group_replicas, gen_ai_client_token_usage,
// gen_ai_client_operation_duration_seconds, toolmesh_model_cost_total,
// toolmesh_run_duration_seconds.
//
// Calls in flight have one instrument per side, so that each description is true where
// it is read and a sum over all processes counts each call once: a worker records
// MetricInFlight (calls it is running), the orchestrator MetricDispatched (calls it has
// sent to a worker and awaits the answer of, network time included).
const (
	MetricToolCallDuration  = "toolmesh.tool.call.duration"           // s, histogram: gen_ai.tool.name, toolmesh.group, toolmesh.outcome
	MetricInFlight          = "toolmesh.worker.calls.in_flight"       // {call}, up-down counter: toolmesh.worker.id, toolmesh.group (worker)
	MetricDispatched        = "toolmesh.orchestrator.calls.in_flight" // {call}, up-down counter: toolmesh.worker.id, toolmesh.group (orchestrator)
	MetricReplicas          = "toolmesh.group.replicas"               // {replica}, gauge: toolmesh.group
	MetricTokenUsage        = "gen_ai.client.token.usage"             // {token}, histogram: gen_ai.operation.name, gen_ai.provider.name, gen_ai.request.model, gen_ai.token.type
	MetricOperationDuration = "gen_ai.client.operation.duration"      // s, histogram: gen_ai.operation.name, gen_ai.provider.name, gen_ai.request.model, gen_ai.response.model, error.type
	MetricCost              = "toolmesh.model.cost"                   // {USD}, counter: gen_ai.request.model
	MetricRunDuration       = "toolmesh.run.duration"                 // s, histogram: toolmesh.outcome
)

// Bucket boundaries the GenAI conventions advise for their histograms; tool calls use
// the duration ones too.
var (
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	runBuckets      = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
)

// The bound of the model names metrics label by beyond the configured ones: a client
// can ask for any model. Past it, new names are recorded as OtherValue, so a stream of
// made-up names neither grows memory nor floods a metrics backend. Tool names need no
// such bound: only tools that exist (offered from the routing table, or registered by
// the worker) are recorded, never a name a model made up.
const (
	maxModelValues = 128
	// OtherValue stands for label values past their bound, as the semantic conventions
	// write an unlisted value.
	OtherValue = "_OTHER"
)

// boundedValues admits the values it was told of and the first max other distinct
// values of a label, and maps the rest to OtherValue.
type boundedValues struct {
	mu    sync.Mutex
	known map[string]bool // true: admitted up front, not counted against max
	other int
	max   int
}

func newBoundedValues(maxValues int) *boundedValues {
	return &boundedValues{known: map[string]bool{}, max: maxValues}
}

// admit makes values always recorded by name.
func (b *boundedValues) admit(values ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, v := range values {
		if _, ok := b.known[v]; !ok {
			b.known[v] = true
		}
	}
}

// admitFor makes v always recorded by name when known was admitted: the dated model
// that answered for a configured one.
func (b *boundedValues) admitFor(v, known string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.known[known] {
		if _, ok := b.known[v]; !ok || !b.known[v] {
			if ok {
				b.other-- // it had taken one of the others' places
			}
			b.known[v] = true
		}
	}
}

func (b *boundedValues) value(v string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.known[v]; ok {
		return v
	}
	if b.other >= b.max {
		return OtherValue
	}
	b.known[v] = false
	b.other++
	return v
}

// instruments are created once per Telemetry.
type instruments struct {
	models *boundedValues

	toolDuration metric.Float64Histogram
	inFlight     metric.Int64UpDownCounter
	dispatched   metric.Int64UpDownCounter
	tokens       metric.Int64Histogram
	opDuration   metric.Float64Histogram
	cost         metric.Float64Counter
	runDuration  metric.Float64Histogram
}

func newInstruments(m metric.Meter, replicas metric.Int64Callback) (*instruments, error) {
	var (
		in   = instruments{models: newBoundedValues(maxModelValues)}
		errs []error
	)
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	in.toolDuration, err = m.Float64Histogram(MetricToolCallDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of tool calls, as the caller saw them (failover included)."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	note(err)
	in.inFlight, err = m.Int64UpDownCounter(MetricInFlight,
		metric.WithUnit("{call}"),
		metric.WithDescription("Tool calls this worker is running now, by worker and group; the signal to scale a tool group on."))
	note(err)
	in.dispatched, err = m.Int64UpDownCounter(MetricDispatched,
		metric.WithUnit("{call}"),
		metric.WithDescription("Tool calls this orchestrator has sent to a worker and not yet had answered, by worker and group (network time and the worker's queue included)."))
	note(err)
	_, err = m.Int64ObservableGauge(MetricReplicas,
		metric.WithUnit("{replica}"),
		metric.WithDescription("Worker replicas registered per tool group."),
		metric.WithInt64Callback(replicas))
	note(err)
	in.tokens, err = m.Int64Histogram(MetricTokenUsage,
		metric.WithUnit("{token}"),
		metric.WithDescription("Number of input and output tokens used."),
		metric.WithExplicitBucketBoundaries(tokenBuckets...))
	note(err)
	in.opDuration, err = m.Float64Histogram(MetricOperationDuration,
		metric.WithUnit("s"),
		metric.WithDescription("GenAI operation duration."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	note(err)
	in.cost, err = m.Float64Counter(MetricCost,
		metric.WithUnit("{USD}"),
		metric.WithDescription("Cost of model calls in US dollars, from the configured price table."))
	note(err)
	in.runDuration, err = m.Float64Histogram(MetricRunDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of runs, by outcome."),
		metric.WithExplicitBucketBoundaries(runBuckets...))
	note(err)
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return &in, nil
}

func (t *Telemetry) instruments() *instruments {
	if t == nil {
		return nil
	}
	return t.inst
}

// RecordToolCall records one tool call in toolmesh.tool.call.duration. EndTool calls it;
// call it directly only for calls that have no execute_tool span.
func (t *Telemetry) RecordToolCall(ctx context.Context, tool, group, outcome string, d time.Duration) {
	in := t.instruments()
	if in == nil {
		return
	}
	set := t.sets.get(attrKey{kind: 't', a: tool, b: outcome, c: group}, func() []attribute.KeyValue {
		attrs := []attribute.KeyValue{KeyToolName.String(tool), KeyOutcome.String(outcome)}
		if group != "" {
			attrs = append(attrs, KeyGroup.String(group))
		}
		return attrs
	})
	in.toolDuration.Record(ctx, d.Seconds(), metric.WithAttributeSet(set))
}

// AddInFlight adds delta (+1 when a call starts running, -1 when it ends) to
// toolmesh.worker.calls.in_flight: the calls the worker workerID is running. The worker
// SDK records it; the orchestrator records AddDispatched instead.
func (t *Telemetry) AddInFlight(ctx context.Context, workerID, group string, delta int64) {
	if in := t.instruments(); in != nil {
		in.inFlight.Add(ctx, delta, metric.WithAttributeSet(t.workerSet(workerID, group)))
	}
}

// AddDispatched adds delta (+1 when a call is sent, -1 when its answer or failure is
// back) to toolmesh.orchestrator.calls.in_flight: the calls the orchestrator awaits from
// the worker workerID.
func (t *Telemetry) AddDispatched(ctx context.Context, workerID, group string, delta int64) {
	if in := t.instruments(); in != nil {
		in.dispatched.Add(ctx, delta, metric.WithAttributeSet(t.workerSet(workerID, group)))
	}
}

// workerSet is the attribute set of a worker's (and group's) counters.
func (t *Telemetry) workerSet(workerID, group string) attribute.Set {
	return t.sets.get(attrKey{kind: 'w', a: workerID, b: group}, func() []attribute.KeyValue { return workerAttrs(workerID, group) })
}

// maxAttrSets bounds the attribute sets kept; past it, sets are built every time.
const maxAttrSets = 4096

// attrKey names the attribute set of one recording: its kind and values.
type attrKey struct {
	kind    byte
	a, b, c string
}

// attrSets keeps the attribute sets of metric recordings, which every call would
// otherwise build (and sort) again: a handful of workers, groups, tools and outcomes.
type attrSets struct {
	mu sync.RWMutex
	m  map[attrKey]attribute.Set
}

func (c *attrSets) get(k attrKey, attrs func() []attribute.KeyValue) attribute.Set {
	c.mu.RLock()
	s, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return s
	}
	s = attribute.NewSet(attrs()...)
	c.mu.Lock()
	if c.m == nil {
		c.m = map[attrKey]attribute.Set{}
	}
	if len(c.m) < maxAttrSets {
		c.m[k] = s
	}
	c.mu.Unlock()
	return s
}

func workerAttrs(workerID, group string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{KeyWorkerID.String(workerID)}
	if group != "" {
		attrs = append(attrs, KeyGroup.String(group))
	}
	return attrs
}

// RegisterReplicaGauge sets the function toolmesh.group.replicas reads at each
// collection: replicas registered, by group. A later call replaces the function; nil
// stops the gauge.
func (t *Telemetry) RegisterReplicaGauge(replicas func() map[string]int64) {
	if t == nil {
		return
	}
	if replicas == nil {
		t.replicas.Store(nil)
		return
	}
	t.replicas.Store(&replicas)
}

func (t *Telemetry) observeReplicas(_ context.Context, o metric.Int64Observer) error {
	f := t.replicas.Load()
	if f == nil {
		return nil
	}
	counts := (*f)()
	for _, g := range slices.Sorted(maps.Keys(counts)) {
		o.Observe(counts[g], metric.WithAttributes(KeyGroup.String(g)))
	}
	return nil
}

// RecordTokens records a model call's token counts in gen_ai.client.token.usage. EndChat
// calls it; call it directly only for usage reported outside a chat span.
func (t *Telemetry) RecordTokens(ctx context.Context, provider, model string, input, output int64) {
	in := t.instruments()
	if in == nil {
		return
	}
	record := func(n int64, typ string) {
		if n <= 0 {
			return
		}
		in.tokens.Record(ctx, n, metric.WithAttributes(append(in.chatAttrs(provider, model), KeyTokenType.String(typ))...))
	}
	record(input, TokenTypeInput)
	record(output, TokenTypeOutput)
}

// chatAttrs are the attributes every chat metric carries.
func (in *instruments) chatAttrs(provider, model string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{KeyOperationName.String(OperationChat), KeyProviderName.String(provider)}
	if model != "" {
		attrs = append(attrs, KeyRequestModel.String(in.models.value(model)))
	}
	return attrs
}

func (t *Telemetry) recordChatDuration(ctx context.Context, provider, model, responseModel, errType string, d time.Duration) {
	in := t.instruments()
	if in == nil {
		return
	}
	attrs := in.chatAttrs(provider, model)
	if responseModel != "" {
		in.models.admitFor(responseModel, model)
		attrs = append(attrs, KeyResponseModel.String(in.models.value(responseModel)))
	}
	if errType != "" {
		attrs = append(attrs, KeyErrorType.String(errType))
	}
	in.opDuration.Record(ctx, d.Seconds(), metric.WithAttributes(attrs...))
}

// RecordCost adds the cost of a model call, in US dollars, to toolmesh.model.cost.
func (t *Telemetry) RecordCost(ctx context.Context, model string, usd float64) {
	in := t.instruments()
	if in == nil || usd <= 0 {
		return
	}
	in.cost.Add(ctx, usd, metric.WithAttributes(KeyRequestModel.String(in.models.value(model))))
}

// RecordRun records a finished run in toolmesh.run.duration. EndRun calls it.
func (t *Telemetry) RecordRun(ctx context.Context, outcome string, d time.Duration) {
	in := t.instruments()
	if in == nil {
		return
	}
	in.runDuration.Record(ctx, d.Seconds(), metric.WithAttributes(KeyOutcome.String(outcome)))
}
