package server

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/agentic"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

func ptr[T any](v T) *T { return &v }

// invalidRequests are requests validateRun refuses, with the field it must name. All of
// them can travel over gRPC (valid UTF-8 everywhere).
var invalidRequests = []struct {
	name  string
	req   *toolpb.RunRequest
	field string
}{
	{"empty prompt and no messages", &toolpb.RunRequest{}, "prompt"},
	{"blank prompt and no messages", &toolpb.RunRequest{Prompt: " \n\t"}, "prompt"},
	{"unspecified message role", &toolpb.RunRequest{Messages: []*toolpb.ConversationMessage{{Text: "hi"}}}, "messages[0].role"},
	{"unknown message role", &toolpb.RunRequest{Prompt: "p", Messages: []*toolpb.ConversationMessage{{Role: toolpb.Role_ROLE_USER, Text: "a"}, {Role: toolpb.Role(42), Text: "b"}}}, "messages[1].role"},
	{"prompt too large", &toolpb.RunRequest{Prompt: strings.Repeat("x", wire.MaxPromptBytes+1)}, "messages"},
	{"negative max_iterations", &toolpb.RunRequest{Prompt: "p", Limits: &toolpb.RunLimits{MaxIterations: -1}}, "limits.max_iterations"},
	{"too many max_iterations", &toolpb.RunRequest{Prompt: "p", Limits: &toolpb.RunLimits{MaxIterations: 1001}}, "limits.max_iterations"},
	{"negative max_parallel_tool_calls", &toolpb.RunRequest{Prompt: "p", Limits: &toolpb.RunLimits{MaxParallelToolCalls: -3}}, "limits.max_parallel_tool_calls"},
	{"too many max_parallel_tool_calls", &toolpb.RunRequest{Prompt: "p", Limits: &toolpb.RunLimits{MaxParallelToolCalls: 65}}, "limits.max_parallel_tool_calls"},
	{"negative timeout", &toolpb.RunRequest{Prompt: "p", Limits: &toolpb.RunLimits{Timeout: durationpb.New(-time.Second)}}, "limits.timeout"},
	// A Duration whose nanos have the opposite sign of its seconds is malformed.
	{"malformed timeout", &toolpb.RunRequest{Prompt: "p", Limits: &toolpb.RunLimits{Timeout: &durationpb.Duration{Seconds: 1, Nanos: -1}}}, "limits.timeout"},
	{"run_id with a space", &toolpb.RunRequest{Prompt: "p", RunId: "has space"}, "run_id"},
	{"run_id too long", &toolpb.RunRequest{Prompt: "p", RunId: strings.Repeat("a", 129)}, "run_id"},
	{"run_id with slash", &toolpb.RunRequest{Prompt: "p", RunId: "a/b"}, "run_id"},
	{"duplicate group", &toolpb.RunRequest{Prompt: "p", ToolGroups: []string{"math", "text", "math"}}, "tool_groups[2]"},
	{"empty group", &toolpb.RunRequest{Prompt: "p", ToolGroups: []string{"math", " "}}, "tool_groups[1]"},
	{"duplicate tool", &toolpb.RunRequest{Prompt: "p", Tools: []string{"add", "add"}}, "tools[1]"},
	{"empty tool", &toolpb.RunRequest{Prompt: "p", Tools: []string{""}}, "tools[0]"},
	{"temperature below range", &toolpb.RunRequest{Prompt: "p", Llm: &toolpb.LlmOptions{Temperature: ptr(-0.1)}}, "llm.temperature"},
	{"temperature above range", &toolpb.RunRequest{Prompt: "p", Llm: &toolpb.LlmOptions{Temperature: ptr(2.5)}}, "llm.temperature"},
	{"temperature infinite", &toolpb.RunRequest{Prompt: "p", Llm: &toolpb.LlmOptions{Temperature: ptr(math.Inf(1))}}, "llm.temperature"},
	{"temperature NaN", &toolpb.RunRequest{Prompt: "p", Llm: &toolpb.LlmOptions{Temperature: ptr(math.NaN())}}, "llm.temperature"},
	{"negative max_output_tokens", &toolpb.RunRequest{Prompt: "p", Llm: &toolpb.LlmOptions{MaxOutputTokens: -1}}, "llm.max_output_tokens"},
	{"empty context key", &toolpb.RunRequest{Prompt: "p", Context: map[string]string{"": "v"}}, "context"},
	{"too many messages", &toolpb.RunRequest{Messages: make([]*toolpb.ConversationMessage, wire.MaxMessages+1)}, "messages"},
	{"too many groups", &toolpb.RunRequest{Prompt: "p", ToolGroups: names("g", wire.MaxRequestGroups+1)}, "tool_groups"},
	{"too many tools", &toolpb.RunRequest{Prompt: "p", Tools: names("t", wire.MaxRequestTools+1)}, "tools"},
	{"group name too long", &toolpb.RunRequest{Prompt: "p", ToolGroups: []string{strings.Repeat("g", 65)}}, "tool_groups[0]"},
	{"model too long", &toolpb.RunRequest{Prompt: "p", Llm: &toolpb.LlmOptions{Model: strings.Repeat("m", wire.MaxModelBytes+1)}}, "llm.model"},
	{"model with a control character", &toolpb.RunRequest{Prompt: "p", Llm: &toolpb.LlmOptions{Model: "gpt\n4"}}, "llm.model"},
	{"role too long", &toolpb.RunRequest{Prompt: "p", Llm: &toolpb.LlmOptions{Role: strings.Repeat("r", wire.MaxRoleBytes+1)}}, "llm.role"},
	{"output schema too large", &toolpb.RunRequest{Prompt: "p", OutputSchemaJson: strings.Repeat(" ", wire.MaxSchemaBytes+1)}, "output_schema_json"},
	{"run_id of a megabyte", &toolpb.RunRequest{Prompt: "p", RunId: strings.Repeat("a", 1<<20)}, "run_id"},
	{"context key over its bound", &toolpb.RunRequest{Prompt: "p", Context: map[string]string{strings.Repeat("k", wire.MaxContextKeyBytes+1): "v"}}, "context"},
	{"interaction context key of a megabyte", &toolpb.RunRequest{Prompt: "p", InteractionContext: map[string]string{strings.Repeat("k", 1<<20): "v"}}, "interaction_context"},
	{"too many context entries", &toolpb.RunRequest{Prompt: "p", Context: entries(wire.MaxContextEntries + 1)}, "context"},
	{"goal too long", &toolpb.RunRequest{Prompt: "p", Goal: strings.Repeat("g", 257)}, "goal"},
	{"goal of a megabyte", &toolpb.RunRequest{Prompt: "p", Goal: strings.Repeat("g", 1<<20)}, "goal"},
	{"goal on two lines", &toolpb.RunRequest{Prompt: "p", Goal: "find the customer\nand call them"}, "goal"},
	{"goal with a control character", &toolpb.RunRequest{Prompt: "p", Goal: "find\x00the customer"}, "goal"},
	{"blank goal", &toolpb.RunRequest{Prompt: "p", Goal: "   "}, "goal"},
	{"rename to a bad name", &toolpb.RunRequest{Prompt: "p", ToolNames: map[string]string{"add": "plus sign"}}, `tool_names["add"]`},
	{"rename of a name that cannot exist", &toolpb.RunRequest{Prompt: "p", ToolNames: map[string]string{"a b": "ab"}}, `tool_names["a b"]`},
	{"two tools renamed alike", &toolpb.RunRequest{Prompt: "p", ToolNames: map[string]string{"add": "op", "sub": "op"}}, `tool_names["sub"]`},
	{"bad exclude pattern", &toolpb.RunRequest{Prompt: "p", ExcludeTools: []string{"add", "[z-a"}}, "exclude_tools[1]"},
	{"empty exclude pattern", &toolpb.RunRequest{Prompt: "p", ExcludeTools: []string{""}}, "exclude_tools[0]"},
	{"agentic spec with a system prompt and a template", &toolpb.RunRequest{Prompt: "p", AgenticTools: []*toolpb.AgenticToolSpec{
		{Name: "x", Description: "X.", Tools: []string{"add"}, SystemPrompt: "You add.", SystemPromptTemplate: "{{ .Default }}"}}}, "agentic_tools[0].system_prompt_template"},
	{"agentic template that does not parse", &toolpb.RunRequest{Prompt: "p", AgenticTools: []*toolpb.AgenticToolSpec{
		{Name: "x", Description: "X.", Tools: []string{"add"}}, {Name: "y", Description: "Y.", Tools: []string{"add"}, SystemPromptTemplate: "On {{ .Input.topic"}}}, "agentic_tools[1].system_prompt_template"},
	{"agentic template with an unknown function", &toolpb.RunRequest{Prompt: "p", AgenticTools: []*toolpb.AgenticToolSpec{
		{Name: "x", Description: "X.", Tools: []string{"add"}, SystemPromptTemplate: `{{ env "HOME" }}`}}}, "agentic_tools[0].system_prompt_template"},
	{"agentic template over 16 KiB", &toolpb.RunRequest{Prompt: "p", AgenticTools: []*toolpb.AgenticToolSpec{
		{Name: "x", Description: "X.", Tools: []string{"add"}, SystemPromptTemplate: strings.Repeat("x", agentic.MaxPromptTemplateBytes+1)}}}, "agentic_tools[0].system_prompt_template"},
}

// entries returns a context of n distinct entries.
func entries(n int) map[string]string {
	m := make(map[string]string, n)
	for _, k := range names("k", n) {
		m[k] = "v"
	}
	return m
}

// names returns n distinct names starting with prefix.
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func TestValidateRunRefuses(t *testing.T) {
	cases := append([]struct {
		name  string
		req   *toolpb.RunRequest
		field string
	}{
		// Invalid UTF-8 cannot cross the wire (protobuf refuses to marshal it), so it is
		// only checked here.
		{"invalid UTF-8 prompt", &toolpb.RunRequest{Prompt: "ok \xff"}, "prompt"},
		{"invalid UTF-8 system prompt", &toolpb.RunRequest{Prompt: "p", SystemPrompt: "\xc3\x28"}, "system_prompt"},
		{"invalid UTF-8 message", &toolpb.RunRequest{Messages: []*toolpb.ConversationMessage{{Role: toolpb.Role_ROLE_USER, Text: "\xff"}}}, "messages[0].text"},
		{"invalid UTF-8 context key", &toolpb.RunRequest{Prompt: "p", Context: map[string]string{"\xff": "v"}}, "context"},
		{"invalid UTF-8 context value", &toolpb.RunRequest{Prompt: "p", Context: map[string]string{"k": "\xff"}}, `context["k"]`},
		{"invalid UTF-8 goal", &toolpb.RunRequest{Prompt: "p", Goal: "find \xff"}, "goal"},
	}, invalidRequests...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fe := validateRun(tc.req)
			if fe == nil {
				t.Fatal("validateRun accepted the request")
			}
			if len(fe.Error()) > 512 {
				t.Errorf("the error is %d bytes long: it echoes the value", len(fe.Error()))
			}
			if fe.field != tc.field || wire.Reasons[fe.reason].Code != codes.InvalidArgument || fe.reason != toolpb.ErrorReason_ERROR_REASON_INVALID_REQUEST {
				t.Errorf("got field %q reason %s (%v); want field %q, %s", fe.field, fe.reason, fe, tc.field, toolpb.ErrorReason_ERROR_REASON_INVALID_REQUEST)
			}
		})
	}
}

func TestValidateRunAccepts(t *testing.T) {
	for name, req := range map[string]*toolpb.RunRequest{
		"prompt only":              {Prompt: "hi"},
		"messages only":            {Messages: []*toolpb.ConversationMessage{{Role: toolpb.Role_ROLE_SYSTEM, Text: "s"}, {Role: toolpb.Role_ROLE_USER, Text: "u"}, {Role: toolpb.Role_ROLE_ASSISTANT}}},
		"limits at their maximum":  {Prompt: "p", Limits: &toolpb.RunLimits{MaxIterations: 1000, MaxParallelToolCalls: 64, Timeout: durationpb.New(time.Hour)}},
		"zero limits":              {Prompt: "p", Limits: &toolpb.RunLimits{}},
		"temperature bounds":       {Prompt: "p", Llm: &toolpb.LlmOptions{Temperature: ptr(0.0)}},
		"temperature 2":            {Prompt: "p", Llm: &toolpb.LlmOptions{Temperature: ptr(2.0)}},
		"run id":                   {Prompt: "p", RunId: "run_A-1.b:c"},
		"same name group and tool": {Prompt: "p", ToolGroups: []string{"x"}, Tools: []string{"x"}},
		"context":                  {Prompt: "p", Context: map[string]string{"tenant": "ünïcode"}},
		"context key at its bound": {Prompt: "p", Context: map[string]string{strings.Repeat("k", wire.MaxContextKeyBytes): "v"}},
		"prompt at the size limit": {Prompt: strings.Repeat("x", wire.MaxPromptBytes)},
		"goal":                     {Prompt: "p", Goal: "Find the customer's last order – and its status"},
		"goal at its bound":        {Prompt: "p", Goal: strings.Repeat("é", 128)},
		"goal of one byte":         {Prompt: "p", Goal: "x"},
	} {
		if fe := validateRun(req); fe != nil {
			t.Errorf("%s: refused: %v", name, fe)
		}
	}
}

// statusDetails returns the ErrorInfo and BadRequest of an error's status.
func statusDetails(t *testing.T, err error) (*status.Status, *errdetails.ErrorInfo, *errdetails.BadRequest) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("not a status: %v", err)
	}
	var info *errdetails.ErrorInfo
	var br *errdetails.BadRequest
	for _, d := range st.Details() {
		switch x := d.(type) {
		case *errdetails.ErrorInfo:
			info = x
		case *errdetails.BadRequest:
			br = x
		}
	}
	return st, info, br
}

func TestRunRefusesInvalidRequests(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := testContext(t)
	for _, tc := range invalidRequests {
		t.Run(tc.name, func(t *testing.T) {
			stream, err := e.orch.Run(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			evs, err := collect(stream)
			if len(evs) != 0 {
				t.Errorf("got %d events before the refusal, want none: %v", len(evs), evs)
			}
			st, info, br := statusDetails(t, err)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("code %v (%v), want InvalidArgument", st.Code(), err)
			}
			if !strings.HasPrefix(st.Message(), tc.field+": ") {
				t.Errorf("message %q does not start with the field %q", st.Message(), tc.field)
			}
			if info.GetReason() != wire.ReasonName(toolpb.ErrorReason_ERROR_REASON_INVALID_REQUEST) || info.GetDomain() != wire.ErrorDomain || info.GetMetadata()["field"] != tc.field {
				t.Errorf("ErrorInfo = %v, want reason %s, domain %s, field %s", info, toolpb.ErrorReason_ERROR_REASON_INVALID_REQUEST, wire.ErrorDomain, tc.field)
			}
			if len(br.GetFieldViolations()) != 1 || br.GetFieldViolations()[0].GetField() != tc.field || br.GetFieldViolations()[0].GetDescription() == "" {
				t.Errorf("BadRequest = %v, want one violation of %s", br, tc.field)
			}

			// The same through pkg/client.
			_, err = e.cl.RunAndWait(ctx, tc.req, nil)
			if !errors.Is(err, client.ErrInvalidRequest) {
				t.Fatalf("client error %v does not match ErrInvalidRequest", err)
			}
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Field != tc.field || ce.Code != codes.InvalidArgument {
				t.Errorf("client error = %#v, want field %q", ce, tc.field)
			}
			if errors.Is(err, client.ErrUnknownGroup) {
				t.Error("invalid request also matches ErrUnknownGroup")
			}
		})
	}
	if n := len(e.model.Requests()); n != 0 {
		t.Errorf("the model was called %d times for invalid requests", n)
	}
}

func TestRunUnknownGroupAndTool(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := testContext(t)
	e.registerRaw(ctx, registration("w-math", examplegroups.Math()))
	e.registerRaw(ctx, registration("w-text", examplegroups.TextGroup()))

	cases := []struct {
		name     string
		req      *toolpb.RunRequest
		field    string
		reason   toolpb.ErrorReason
		sentinel error
		contains []string
	}{
		{"unknown required group", &toolpb.RunRequest{Prompt: "p", ToolGroups: []string{"math"}, RequiredToolGroups: []*toolpb.ToolGroupRequirement{{Role: "text"}, {Role: "weather", Tools: []string{"forecast"}}}},
			"required_tool_groups[1]", toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL_GROUP, client.ErrUnknownGroup,
			[]string{"Required tool group with role='weather' could not be resolved: No tool group matching role 'weather'"}},
		{"unknown tool", &toolpb.RunRequest{Prompt: "p", ToolGroups: []string{"text"}, Tools: []string{"add", "forecast"}}, "tools[1]", toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL, client.ErrUnknownTool,
			[]string{`"forecast"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stream, err := e.orch.Run(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			evs, err := collect(stream)
			if len(evs) != 0 {
				t.Errorf("got events before the refusal: %v", evs)
			}
			st, info, _ := statusDetails(t, err)
			if st.Code() != codes.NotFound {
				t.Fatalf("code %v (%v), want NotFound", st.Code(), err)
			}
			if info.GetReason() != wire.ReasonName(tc.reason) || info.GetDomain() != wire.ErrorDomain || info.GetMetadata()["field"] != tc.field {
				t.Errorf("ErrorInfo = %v, want reason %s, field %s", info, tc.reason, tc.field)
			}
			for _, s := range append(tc.contains, tc.field) {
				if !strings.Contains(st.Message(), s) {
					t.Errorf("message %q does not contain %q", st.Message(), s)
				}
			}

			_, err = e.cl.RunAndWait(ctx, tc.req, nil)
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("client error %v does not match %v", err, tc.sentinel)
			}
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Field != tc.field || ce.Code != codes.NotFound {
				t.Errorf("client error = %#v, want field %q", ce, tc.field)
			}
		})
	}

	// A required group that lacks a required tool, after the run started nothing.
	_, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "p", RequiredToolGroups: []*toolpb.ToolGroupRequirement{{Role: "text", Tools: []string{"reverse", "translate", "spell"}}}}, nil)
	var rce *client.Error
	if !errors.Is(err, client.ErrRequiredToolsMissing) || !errors.As(err, &rce) || rce.Code != codes.FailedPrecondition || rce.Field != "required_tool_groups[0].tools" ||
		!strings.Contains(err.Error(), "Tool group with role='text' is missing required tools: [translate, spell]. Available: [lowercase, reverse, uppercase, word_count]") {
		t.Errorf("missing required tools: %v", err)
	}
	// A required group whose required tools are all there is offered, facade children counted.
	var started []string
	if _, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "p", RequiredToolGroups: []*toolpb.ToolGroupRequirement{{Role: "math", Tools: []string{"add", "round"}}}}, func(ev *toolpb.RunResponse) {
		if s := ev.GetStarted(); s != nil {
			started = s.GetTools()
		}
	}); err != nil && !errors.Is(err, client.ErrModel) {
		t.Errorf("required group present: %v", err)
	}
	if len(started) == 0 {
		t.Errorf("the run with its required group did not start")
	}
	// ListTools names the unknown group the same way.
	_, err = e.cl.ListTools(ctx, "text", "nope")
	var ce *client.Error
	if !errors.Is(err, client.ErrUnknownGroup) || !errors.As(err, &ce) || ce.Field != "tool_groups[1]" {
		t.Errorf("ListTools(text, nope) = %v, want ErrUnknownGroup naming tool_groups[1]", err)
	}
}

// TestUnservedGroupWarns: a requested group that nobody serves and that is not required
// does not fail the run: it starts without it, and a warning event right after started
// says so, naming the field.
func TestUnservedGroupWarns(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := testContext(t)
	e.registerRaw(ctx, registration("w-text", examplegroups.TextGroup()))
	var evs []*toolpb.RunResponse
	_, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "p", ToolGroups: []string{"text", "weather"}}, func(ev *toolpb.RunResponse) { evs = append(evs, ev) })
	if err != nil && !errors.Is(err, client.ErrModel) {
		t.Fatal(err)
	}
	if len(evs) < 2 || evs[0].GetStarted() == nil {
		t.Fatalf("events %v", evs)
	}
	w := evs[1].GetWarning()
	if w == nil || w.GetField() != "tool_groups[1]" || w.GetMessage() != "No tool group matching role 'weather': no worker serves it (known groups: [agent_process, blackboard, communication, text]); the run goes on without it" {
		t.Errorf("second event %v, want the warning", evs[1])
	}
	if got := strings.Join(evs[0].GetStarted().GetTools(), ","); got != "lowercase,reverse,uppercase,word_count" {
		t.Errorf("started with %s", got)
	}
}

// TestRequiredGroupRequestBounds: required groups are checked like tool_groups, and a
// group may not be both requested and required.
func TestRequiredGroupRequestBounds(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := testContext(t)
	for _, tc := range []struct {
		req   *toolpb.RunRequest
		field string
	}{
		{&toolpb.RunRequest{Prompt: "p", RequiredToolGroups: []*toolpb.ToolGroupRequirement{{Role: "bad role"}}}, "required_tool_groups[0].role"},
		{&toolpb.RunRequest{Prompt: "p", RequiredToolGroups: []*toolpb.ToolGroupRequirement{{Role: "a"}, {Role: "a"}}}, "required_tool_groups[1].role"},
		{&toolpb.RunRequest{Prompt: "p", ToolGroups: []string{"a"}, RequiredToolGroups: []*toolpb.ToolGroupRequirement{{Role: "a"}}}, "required_tool_groups[0].role"},
		{&toolpb.RunRequest{Prompt: "p", RequiredToolGroups: []*toolpb.ToolGroupRequirement{{Role: "a", Tools: []string{"x", "x"}}}}, "required_tool_groups[0].tools[1]"},
	} {
		_, err := e.cl.RunAndWait(ctx, tc.req, nil)
		var ce *client.Error
		if !errors.Is(err, client.ErrInvalidRequest) || !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%v: %v, want INVALID_REQUEST naming %s", tc.req.GetRequiredToolGroups(), err, tc.field)
		}
	}
}

// CancelRun's reason is text the journal keeps: a NUL byte in it is refused naming the
// field (PostgreSQL refused the decision, and every retry was answered
// JOURNAL_UNAVAILABLE).
func TestValidateCancel(t *testing.T) {
	for _, c := range []struct {
		req   *toolpb.CancelRunRequest
		field string
	}{
		{&toolpb.CancelRunRequest{RunId: "r1", Reason: "enough"}, ""},
		{&toolpb.CancelRunRequest{RunId: "r1", Reason: "stop\x00it"}, "reason"},
		{&toolpb.CancelRunRequest{RunId: "r1", Reason: strings.Repeat("x", 5000)}, "reason"},
		{&toolpb.CancelRunRequest{Reason: "enough"}, "run_id"},
	} {
		fe := validateCancel(c.req)
		switch {
		case c.field == "" && fe != nil:
			t.Errorf("%v: refused: %v", c.req, fe.status())
		case c.field != "" && (fe == nil || fe.field != c.field):
			t.Errorf("%v: %v; want refused naming %s", c.req, fe, c.field)
		}
	}
}
