package server

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

var runIDRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// maxPromptBytes bounds the text a client may send in one request.
const maxPromptBytes = 1 << 20

// validateRun checks a RunRequest on its own, before anything is resolved. Each error
// names the offending field.
func validateRun(req *toolpb.RunRequest) *fieldError {
	if strings.TrimSpace(req.GetPrompt()) == "" && len(req.GetMessages()) == 0 {
		return invalid("prompt", "is empty and there are no messages: give a prompt or messages")
	}
	total := len(req.GetPrompt()) + len(req.GetSystemPrompt())
	if !utf8.ValidString(req.GetPrompt()) {
		return invalid("prompt", "is not valid UTF-8")
	}
	if !utf8.ValidString(req.GetSystemPrompt()) {
		return invalid("system_prompt", "is not valid UTF-8")
	}
	for i, m := range req.GetMessages() {
		f := func(name string) string { return "messages[" + itoa(i) + "]." + name }
		switch m.GetRole() {
		case toolpb.Role_ROLE_SYSTEM, toolpb.Role_ROLE_USER, toolpb.Role_ROLE_ASSISTANT:
		default:
			return invalid(f("role"), "must be ROLE_SYSTEM, ROLE_USER or ROLE_ASSISTANT, got %s", m.GetRole())
		}
		if !utf8.ValidString(m.GetText()) {
			return invalid(f("text"), "is not valid UTF-8")
		}
		total += len(m.GetText())
	}
	if total > maxPromptBytes {
		return invalid("messages", "the prompt, system prompt and messages add up to %d bytes; the limit is %d", total, maxPromptBytes)
	}
	seen := map[string]bool{}
	for i, g := range req.GetToolGroups() {
		if strings.TrimSpace(g) == "" {
			return invalid("tool_groups["+itoa(i)+"]", "is empty")
		}
		if seen["g:"+g] {
			return invalid("tool_groups["+itoa(i)+"]", "group %q is listed twice", g)
		}
		seen["g:"+g] = true
	}
	for i, t := range req.GetTools() {
		if strings.TrimSpace(t) == "" {
			return invalid("tools["+itoa(i)+"]", "is empty")
		}
		if seen["t:"+t] {
			return invalid("tools["+itoa(i)+"]", "tool %q is listed twice", t)
		}
		seen["t:"+t] = true
	}
	if l := req.GetLimits(); l != nil {
		if l.GetMaxIterations() < 0 {
			return invalid("limits.max_iterations", "must not be negative, got %d", l.GetMaxIterations())
		}
		if l.GetMaxIterations() > 1000 {
			return invalid("limits.max_iterations", "must be at most 1000, got %d", l.GetMaxIterations())
		}
		if l.GetMaxParallelToolCalls() < 0 {
			return invalid("limits.max_parallel_tool_calls", "must not be negative, got %d", l.GetMaxParallelToolCalls())
		}
		if l.GetMaxParallelToolCalls() > 64 {
			return invalid("limits.max_parallel_tool_calls", "must be at most 64, got %d", l.GetMaxParallelToolCalls())
		}
		if l.GetMaxTokens() < 0 {
			return invalid("limits.max_tokens", "must not be negative, got %d", l.GetMaxTokens())
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
	}
	if o := req.GetLlm(); o != nil {
		// Written so that NaN, which fails every comparison, is refused too.
		if t := o.GetTemperature(); o.Temperature != nil && !(t >= 0 && t <= 2) {
			return invalid("llm.temperature", "must be between 0 and 2, got %g", o.GetTemperature())
		}
		if o.GetMaxOutputTokens() < 0 {
			return invalid("llm.max_output_tokens", "must not be negative, got %d", o.GetMaxOutputTokens())
		}
	}
	if id := req.GetRunId(); id != "" && !runIDRE.MatchString(id) {
		return invalid("run_id", "must match %s", runIDRE)
	}
	for _, field := range []struct {
		name string
		m    map[string]string
	}{{"context", req.GetContext()}, {"interaction_context", req.GetInteractionContext()}} {
		for _, k := range slices.Sorted(maps.Keys(field.m)) {
			switch {
			case k == "":
				return invalid(field.name, "has an empty key")
			case !utf8.ValidString(k):
				return invalid(field.name, "key %q is not valid UTF-8", k)
			case toolctx.IsReserved(k):
				return invalid(fmt.Sprintf("%s[%q]", field.name, k), "the key prefix %q is reserved for toolmesh", toolctx.ReservedPrefix)
			case !utf8.ValidString(field.m[k]):
				return invalid(fmt.Sprintf("%s[%q]", field.name, k), "is not valid UTF-8")
			}
		}
	}
	return nil
}

func itoa(i int) string { return strconv.Itoa(i) }
