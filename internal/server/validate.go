package server

import (
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// validateRun checks a RunRequest on its own, before anything is resolved. Each error
// names the offending field; none echoes an oversized value.
func validateRun(req *toolpb.RunRequest) *fieldError {
	if blank(req.GetPrompt()) && len(req.GetMessages()) == 0 {
		return invalid("prompt", "is empty and there are no messages: give a prompt or messages")
	}
	if n := len(req.GetMessages()); n > wire.MaxMessages {
		return invalid("messages", "has %d messages; the limit is %d", n, wire.MaxMessages)
	}
	total := len(req.GetPrompt()) + len(req.GetSystemPrompt())
	for i, m := range req.GetMessages() {
		total += len(m.GetText())
		switch m.GetRole() {
		case toolpb.Role_ROLE_SYSTEM, toolpb.Role_ROLE_USER, toolpb.Role_ROLE_ASSISTANT:
		default:
			return invalid(indexed("messages", i)+".role", "must be ROLE_SYSTEM, ROLE_USER or ROLE_ASSISTANT, got %s", m.GetRole())
		}
	}
	if total > wire.MaxPromptBytes {
		return invalid("messages", "the prompt, system prompt and messages add up to %d bytes; the limit is %d", total, wire.MaxPromptBytes)
	}
	texts := []struct{ field, s string }{{"prompt", req.GetPrompt()}, {"system_prompt", req.GetSystemPrompt()}}
	for i, m := range req.GetMessages() {
		texts = append(texts, struct{ field, s string }{indexed("messages", i) + ".text", m.GetText()})
	}
	for _, t := range texts {
		if p := wire.CheckText(t.s, wire.MaxPromptBytes); p != "" {
			return invalid(t.field, "%s", p)
		}
	}
	if fe := checkNames("tool_groups", req.GetToolGroups(), wire.RoleRE, wire.MaxRequestGroups); fe != nil {
		return fe
	}
	if fe := checkNames("tools", req.GetTools(), wire.ToolNameRE, wire.MaxRequestTools); fe != nil {
		return fe
	}
	if fe := validateLimits(req.GetLimits()); fe != nil {
		return fe
	}
	if fe := validateLLM(req.GetLlm()); fe != nil {
		return fe
	}
	if fe := checkRunID("run_id", req.GetRunId(), false); fe != nil {
		return fe
	}
	if p := wire.CheckText(req.GetOutputSchemaJson(), wire.MaxSchemaBytes); p != "" {
		return invalid("output_schema_json", "%s", p)
	}
	for _, field := range []struct {
		name string
		m    map[string]string
	}{{"context", req.GetContext()}, {"interaction_context", req.GetInteractionContext()}} {
		if fe := checkContext(field.name, field.m); fe != nil {
			return fe
		}
	}
	if fe := validateRequirements(req); fe != nil {
		return fe
	}
	if fe := validateAgentic(req.GetAgenticTools()); fe != nil {
		return fe
	}
	if fe := validateChaining("chaining_sources", req.GetChainingSources()); fe != nil {
		return fe
	}
	if a := req.GetAgent(); a != "" && !wire.ToolNameRE.MatchString(a) {
		return invalid("agent", "must be 1 to 64 characters of [A-Za-z0-9_-]")
	}
	if fe := validateGoal(req.GetGoal()); fe != nil {
		return fe
	}
	if fe := validateToolNaming(req.GetToolNames(), req.GetExcludeTools()); fe != nil {
		return fe
	}
	return validateSinks(req.GetArtifactSinks())
}

// Bounds of a run's renaming and filtering of its tools.
const (
	maxToolNames   = 256
	maxExcludes    = 64
	maxPatternSize = 256
)

// validateToolNaming checks tool_names (valid names, none given twice) and
// exclude_tools (valid globs).
func validateToolNaming(names map[string]string, excludes []string) *fieldError {
	if len(names) > maxToolNames {
		return invalid("tool_names", "has %d entries; at most %d", len(names), maxToolNames)
	}
	given := map[string]string{}
	for _, from := range slices.Sorted(maps.Keys(names)) {
		to := names[from]
		key := "tool_names[" + quote(from) + "]"
		switch {
		case !wire.ToolNameRE.MatchString(from):
			return invalid(key, "names a tool %q that cannot exist: a tool's name is 1 to 64 characters of [A-Za-z0-9_-]", from)
		case !wire.ToolNameRE.MatchString(to):
			return invalid(key, "must be 1 to 64 characters of [A-Za-z0-9_-], got %q", to)
		case given[to] != "":
			return invalid(key, "gives the name %q that %q has too", to, given[to])
		}
		given[to] = from
	}
	if len(excludes) > maxExcludes {
		return invalid("exclude_tools", "has %d patterns; at most %d", len(excludes), maxExcludes)
	}
	for i, p := range excludes {
		key := fmt.Sprintf("exclude_tools[%d]", i)
		if len(p) == 0 || len(p) > maxPatternSize {
			return invalid(key, "must be 1 to %d bytes, got %d", maxPatternSize, len(p))
		}
		if _, err := path.Match(p, ""); err != nil {
			return invalid(key, "is not a valid pattern: %v", err)
		}
	}
	return nil
}

// maxGoalBytes bounds a run's goal.
const maxGoalBytes = 256

// validateGoal checks a run's goal: empty (none), or one line of printable text.
func validateGoal(goal string) *fieldError {
	if goal == "" {
		return nil
	}
	if p := wire.CheckPrintable(goal, maxGoalBytes); p != "" {
		return invalid("goal", "%s", p)
	}
	if blank(goal) {
		return invalid("goal", "is blank: leave it empty for a run without a goal")
	}
	return nil
}

// validateRequirements checks the required tool groups: bounds, names, no role twice and
// none also in tool_groups.
func validateRequirements(req *toolpb.RunRequest) *fieldError {
	rqs := req.GetRequiredToolGroups()
	if len(rqs) > wire.MaxRequestGroups {
		return invalid("required_tool_groups", "has %d groups; the limit is %d", len(rqs), wire.MaxRequestGroups)
	}
	roles := make([]string, len(rqs))
	for i, rq := range rqs {
		roles[i] = rq.GetRole()
	}
	if fe := checkNames("required_tool_groups", roles, wire.RoleRE, wire.MaxRequestGroups); fe != nil {
		fe.field += ".role"
		return fe
	}
	for i, rq := range rqs {
		f := indexed("required_tool_groups", i)
		if slices.Contains(req.GetToolGroups(), rq.GetRole()) {
			return invalid(f+".role", "%s is also in tool_groups: list a group in one of the two", quote(rq.GetRole()))
		}
		if fe := checkNames(f+".tools", rq.GetTools(), wire.ToolNameRE, wire.MaxRequestTools); fe != nil {
			return fe
		}
	}
	return nil
}

// Bounds of a run's artifact sinks.
const (
	maxRunSinks       = 32
	maxSinkNames      = 8
	maxExpressionSize = 4 << 10
)

// validateSinks checks the bounds of a run's artifact sinks; their expressions and sink
// names are checked when the run is prepared.
func validateSinks(specs []*toolpb.ArtifactSinkSpec) *fieldError {
	if len(specs) > maxRunSinks {
		return invalid("artifact_sinks", "has %d sinks; the limit is %d", len(specs), maxRunSinks)
	}
	for i, spec := range specs {
		f := indexed("artifact_sinks", i)
		if fe := checkNames(f+".tools", spec.GetTools(), wire.ToolNameRE, 64); fe != nil {
			return fe
		}
		if fe := checkNames(f+".tool_groups", spec.GetToolGroups(), wire.RoleRE, 64); fe != nil {
			return fe
		}
		for _, t := range []struct {
			field, s string
			limit    int
		}{
			{".type_name", spec.GetTypeName(), wire.MaxTypeNameBytes},
			{".transform_type_name", spec.GetTransformTypeName(), wire.MaxTypeNameBytes},
			{".when", spec.GetWhen(), maxExpressionSize},
			{".transform", spec.GetTransform(), maxExpressionSize},
		} {
			if p := wire.CheckText(t.s, t.limit); p != "" {
				return invalid(f+t.field, "%s", p)
			}
		}
		switch n := len(spec.GetSinks()); {
		case n == 0:
			return invalid(f+".sinks", "is empty: name at least one sink (blackboard, assets, or one the orchestrator configures)")
		case n > maxSinkNames:
			return invalid(f+".sinks", "has %d sinks; the limit is %d", n, maxSinkNames)
		}
		for j, name := range spec.GetSinks() {
			if p := wire.CheckText(name, 64); p != "" || name == "" {
				return invalid(fmt.Sprintf("%s.sinks[%d]", f, j), "must be a sink name of 1 to 64 bytes")
			}
		}
	}
	return nil
}

// checkNames checks a list of group roles or tool names: its length, each name, and
// that none is listed twice.
func checkNames(field string, names []string, re interface{ MatchString(string) bool }, limit int) *fieldError {
	if len(names) > limit {
		return invalid(field, "lists %d names; the limit is %d", len(names), limit)
	}
	seen := make(map[string]bool, len(names))
	for i, n := range names {
		f := indexed(field, i)
		switch {
		case strings.TrimSpace(n) == "":
			return invalid(f, "is empty")
		case len(n) > 64 || !re.MatchString(n):
			return invalid(f, "%s is not a valid name (%s)", quote(n), re)
		case seen[n]:
			return invalid(f, "%s is listed twice", quote(n))
		}
		seen[n] = true
	}
	return nil
}

func validateLimits(l *toolpb.RunLimits) *fieldError {
	if l == nil {
		return nil
	}
	ints := []struct {
		field    string
		v, limit int64
	}{
		{"limits.max_iterations", int64(l.GetMaxIterations()), 1000},
		{"limits.max_parallel_tool_calls", int64(l.GetMaxParallelToolCalls()), 64},
		{"limits.max_tokens", l.GetMaxTokens(), math.MaxInt64},
		{"limits.max_actions", int64(l.GetMaxActions()), 1 << 20},
	}
	for _, x := range ints {
		switch {
		case x.v < 0:
			return invalid(x.field, "must not be negative, got %d", x.v)
		case x.v > x.limit:
			return invalid(x.field, "must be at most %d, got %d", x.limit, x.v)
		}
	}
	if c := l.GetMaxCostUsd(); c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
		return invalid("limits.max_cost_usd", "must be a non-negative number, got %v", c)
	}
	if t := l.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil {
			return invalid("limits.timeout", "%v", err)
		}
		if t.AsDuration() < 0 {
			return invalid("limits.timeout", "must not be negative, got %s", t.AsDuration())
		}
	}
	return nil
}

func validateLLM(o *toolpb.LlmOptions) *fieldError {
	if o == nil {
		return nil
	}
	// Written so that NaN, which fails every comparison, is refused too.
	if t := o.GetTemperature(); o.Temperature != nil && !(t >= 0 && t <= 2) {
		return invalid("llm.temperature", "must be between 0 and 2, got %g", o.GetTemperature())
	}
	if o.GetMaxOutputTokens() < 0 {
		return invalid("llm.max_output_tokens", "must not be negative, got %d", o.GetMaxOutputTokens())
	}
	if p := wire.CheckPrintable(o.GetModel(), wire.MaxModelBytes); p != "" {
		return invalid("llm.model", "%s", p)
	}
	if p := wire.CheckPrintable(o.GetRole(), wire.MaxRoleBytes); p != "" {
		return invalid("llm.role", "%s", p)
	}
	return nil
}

// checkContext checks one level of a run's ToolCallContext entry by entry; its encoded
// size is checked with the other level, by the run service.
func checkContext(field string, m map[string]string) *fieldError {
	// The encoded bound (context.max_bytes, 8 KiB by default, at most 1 MiB) is checked
	// later; this refuses what could never fit before sorting megabytes of keys.
	if len(m) > wire.MaxContextEntries {
		return invalid(field, "has %d entries; the limit is %d", len(m), wire.MaxContextEntries)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		f := fmt.Sprintf("%s[%s]", field, quote(k))
		switch {
		case k == "":
			return invalid(field, "has an empty key")
		case wire.CheckText(k, wire.MaxContextKeyBytes) != "":
			return invalid(field, "a key %s", wire.CheckText(k, wire.MaxContextKeyBytes))
		case toolctx.IsReserved(k):
			return invalid(f, "the key prefix %q is reserved for toolmesh", toolctx.ReservedPrefix)
		case wire.CheckText(m[k], 1<<20) != "":
			return invalid(f, "%s", wire.CheckText(m[k], 1<<20))
		}
	}
	return nil
}

// checkRunID checks a run id; an empty one is valid unless required.
func checkRunID(field, id string, required bool) *fieldError {
	if id == "" && !required {
		return nil
	}
	if p := wire.CheckID(id, wire.RunIDRE, 128); p != "" {
		return invalid(field, "%s", p)
	}
	return nil
}

func validateListTools(req *toolpb.ListToolsRequest) *fieldError {
	return checkNames("tool_groups", req.GetToolGroups(), wire.RoleRE, wire.MaxRequestGroups)
}

func validateCancel(req *toolpb.CancelRunRequest) *fieldError {
	if fe := checkRunID("run_id", req.GetRunId(), true); fe != nil {
		return fe
	}
	if p := checkStoredText(req.GetReason(), wire.MaxReasonBytes); p != "" {
		return invalid("reason", "%s", p)
	}
	return nil
}

// checkStoredText is wire.CheckText for text the run's journal keeps (a decision's
// reason, the call it is about): no NUL bytes either, which PostgreSQL does not keep in
// text.
func checkStoredText(s string, maxBytes int) string {
	if p := wire.CheckText(s, maxBytes); p != "" {
		return p
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "holds a NUL byte"
	}
	return ""
}

// quote quotes a name for a message, shortened when long.
func quote(s string) string { return strconv.Quote(wire.Truncate(s, 64)) }

func indexed(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

func blank(s string) bool { return strings.TrimSpace(s) == "" }
