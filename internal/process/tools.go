package process

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// The roles of the built-in tool groups: a run asks for them in tool_groups like any
// other group, and the orchestrator serves them itself.
const (
	GroupAgentProcess  = "agent_process"
	GroupBlackboard    = "blackboard"
	GroupCommunication = "communication"
)

// Groups are the built-in groups' descriptions, by role.
var Groups = map[string]string{
	GroupAgentProcess:  "Introspection of the current run: status, budget, cost, history, tool statistics, models",
	GroupBlackboard:    "Access to the objects on the current run's blackboard",
	GroupCommunication: "Progress updates and messages to the user",
}

// GroupTools returns the tools of a built-in group, or false for another role.
func GroupTools(role string, f Formatter) ([]tool.Tool, bool) {
	if f == nil {
		// With the default formatter the tools are the same for every run (a call finds
		// its run's process in its context): made once, their schemas compiled once.
		ts, ok := defaultGroupTools()[role]
		return slices.Clone(ts), ok
	}
	return groupTools(role, f)
}

// defaultGroupTools are the built-in groups' tools with the default formatter.
var defaultGroupTools = sync.OnceValue(func() map[string][]tool.Tool {
	m := map[string][]tool.Tool{}
	for role := range Groups {
		m[role], _ = groupTools(role, nil)
	}
	return m
})

func groupTools(role string, f Formatter) ([]tool.Tool, bool) {
	switch role {
	case GroupAgentProcess:
		return []tool.Tool{AgentProcessTools()}, true
	case GroupBlackboard:
		return []tool.Tool{BlackboardTools(f)}, true
	case GroupCommunication:
		return []tool.Tool{ProgressTool(), CommunicateTool()}, true
	}
	return nil, false
}

// Model-visible texts of the built-in tools.
const (
	noProcess           = "No agent process available. These tools require an active agent context."
	noProcessBlackboard = "No agent process available. Blackboard tools require an active agent context."
)

// fixed is a tool that describes the run's process. What it says depends on when it is
// called (the running time, the usage so far), so a run's journal keeps what it said
// (toolcall.Journaled, as a fact the model's next request waits for): a resumed run
// replays it and asks the model exactly what it asked before.
func fixed(name, description string, fn func(p *Process) string, noProc string) tool.Tool {
	return tool.New(name, description, schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		res, _ := toolcall.Journaled(ctx, name, false, toolcall.Dispatcher{Send: func(ctx context.Context) (tool.Result, []byte) {
			p := FromContext(ctx)
			if p == nil {
				return tool.Text(noProc), nil
			}
			return tool.Text(fn(p)), nil
		}})
		return res, nil
	})
}

// AgentProcessTools is the agent_process facade: six tools that describe the current run.
func AgentProcessTools() tool.Facade {
	children := []tool.Tool{
		fixed("process_status", "Get the current process status, ID, running time, and goal information", statusText, noProcess),
		fixed("process_budget", "Get the budget limits and current usage against those limits", budgetText, noProcess),
		fixed("process_cost", "Get detailed cost and token usage information", costText, noProcess),
		fixed("process_history", "Get the history of actions taken in this process", historyText, noProcess),
		fixed("process_tools_stats", "Get statistics about tool usage in this process", statsText, noProcess),
		fixed("process_models", "Get information about which models (LLM and embedding) have been used", modelsText, noProcess),
	}
	return tool.Of("agent_process",
		"Access information about the current agent process including status, budget, cost, and history. Invoke to see available operations.",
		children,
		tool.UsageNotes("Use process_status for current state and runtime. Use process_budget to check limits. Use process_cost to see spending."))
}

func lines(ls ...string) string { return strings.Join(ls, "\n") }

func statusText(p *Process) string {
	st := p.Snapshot()
	goal := "No goal (utility process)"
	if st.Goal != "" {
		goal = st.Goal
	}
	parent := "none (root process)"
	if st.ParentID != "" {
		parent = st.ParentID
	}
	return lines(
		"Process ID: "+st.ID,
		"Status: "+string(st.Status),
		"Running time: "+FormatDuration(time.Since(st.Started)),
		"Goal: "+goal,
		"Parent ID: "+parent,
	)
}

func budgetText(p *Process) string {
	st := p.Snapshot()
	l, u := st.Limits, st.Usage
	cost := budgetLines(l.MaxCostUSD > 0, "Cost limit: none", fmt.Sprintf("  Used: $%.4f", u.CostUSD),
		fmt.Sprintf("Cost limit: $%.4f", l.MaxCostUSD), fmt.Sprintf("  Remaining: $%.4f", l.MaxCostUSD-u.CostUSD))
	tokens := budgetLines(l.MaxTokens > 0, "Token limit: none", fmt.Sprintf("  Used: %d", u.Tokens()),
		"Token limit: "+thousands(l.MaxTokens), fmt.Sprintf("  Remaining: %d", l.MaxTokens-u.Tokens()))
	actions := budgetLines(l.MaxActions > 0, "Action limit: none", fmt.Sprintf("  Used: %d", st.Actions()),
		fmt.Sprintf("Action limit: %d", l.MaxActions), fmt.Sprintf("  Remaining: %d", l.MaxActions-st.Actions()))
	out := []string{"Budget Status:", ""}
	out = append(out, cost...)
	out = append(out, "")
	out = append(out, tokens...)
	out = append(out, "")
	out = append(out, actions...)
	return lines(out...)
}

// budgetLines are the three lines of one limit: the limit, its use and what remains. A
// limit the run does not have (set false) reads as none, with nothing but itself to
// bound what remains.
func budgetLines(set bool, none, used, limit, remaining string) []string {
	if !set {
		return []string{none, used, "  Remaining: unlimited"}
	}
	return []string{limit, used, remaining}
}

func costText(p *Process) string {
	u := p.Snapshot().Usage
	return lines(
		"Cost and Usage:",
		"",
		fmt.Sprintf("Total cost: $%.6f", u.CostUSD),
		fmt.Sprintf("LLM invocations: %d", u.ModelCalls),
		fmt.Sprintf("Embedding invocations: %d", u.EmbeddingCalls),
		"",
		"Tokens used:",
		fmt.Sprintf("  Prompt tokens: %d", u.PromptTokens),
		fmt.Sprintf("  Completion tokens: %d", u.CompletionTokens),
		fmt.Sprintf("  Total tokens: %d", u.Tokens()),
	)
}

func historyText(p *Process) string {
	h := p.Snapshot().History
	if len(h) == 0 {
		return "No actions have been executed yet."
	}
	out := []string{fmt.Sprintf("Action history (%d action(s)):", len(h)), ""}
	for i, a := range h {
		out = append(out, fmt.Sprintf("%d. %s (%s)", i+1, a.Tool, FormatDuration(a.Duration)))
	}
	return lines(out...)
}

func statsText(p *Process) string {
	st := p.Snapshot()
	stats := st.Stats()
	if len(stats) == 0 {
		return "No tools have been called yet."
	}
	out := []string{"Tool Usage Statistics:", "", fmt.Sprintf("Total tool calls: %d", st.Actions()), fmt.Sprintf("Unique tools used: %d", len(stats)), "", "Calls by tool:"}
	for _, s := range stats {
		out = append(out, fmt.Sprintf("  %s: %d calls", s.Tool, s.Calls))
	}
	return lines(out...)
}

func modelsText(p *Process) string {
	ms := p.Snapshot().Models
	if len(ms) == 0 {
		return "No models have been used yet."
	}
	out := []string{fmt.Sprintf("Models used (%d):", len(ms)), ""}
	for _, m := range ms {
		out = append(out, fmt.Sprintf("- %s (%s)", m.Name, m.Provider))
	}
	return lines(out...)
}

// FormatDuration formats a duration as the process tools show it: "1h 2m 3s", "2m 3s",
// "3.4s" or "250ms".
func FormatDuration(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%dh %dm %ds", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d >= time.Second:
		return fmt.Sprintf("%d.%ds", int(d.Seconds()), int(d/(100*time.Millisecond))%10)
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// thousands writes n with comma thousands separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Formatter renders a blackboard entry for the model.
type Formatter func(tool.Entry) string

// DefaultFormatter renders an entry as its "content" or "infoString" field when it is a
// JSON object with one of them as a string, and otherwise as indented JSON; a blob as
// BlobText.
func DefaultFormatter(e tool.Entry) string {
	if e.IsBlob() {
		return BlobText(e)
	}
	var fields struct {
		InfoString *string `json:"infoString"`
		Content    *string `json:"content"`
	}
	if len(e.JSON) > 0 && e.JSON[0] == '{' && json.Unmarshal(e.JSON, &fields) == nil {
		switch {
		case fields.InfoString != nil:
			return *fields.InfoString
		case fields.Content != nil:
			return *fields.Content
		}
	}
	var b bytes.Buffer
	if json.Indent(&b, e.JSON, "", "  ") != nil {
		return string(e.JSON)
	}
	return b.String()
}

// BlobText is how the blackboard tools show a blob, never its bytes:
// "<type name> (<media type>, <n> bytes)", such as "chart.Png (image/png, 5120 bytes)".
func BlobText(e tool.Entry) string {
	return fmt.Sprintf("%s (%s, %d bytes)", e.TypeName, e.MediaType, len(e.Data))
}

// typeLabel is the name the blackboard tools print for an entry's type: its simple name,
// or the whole name when that is empty.
func typeLabel(e tool.Entry) string {
	if s := tool.SimpleTypeName(e.TypeName); s != "" {
		return s
	}
	return e.TypeName
}

// stringParam reads a string parameter; blank or invalid JSON counts as no parameters.
func stringParam(input, name string) string {
	var m map[string]any
	if strings.TrimSpace(input) == "" || json.Unmarshal([]byte(input), &m) != nil {
		return ""
	}
	s, _ := m[name].(string)
	return s
}

// BlackboardTools is the blackboard facade: five tools over the run's blackboard. A nil
// formatter means DefaultFormatter. A blob reads as BlobText whatever the formatter: the
// formatter sees JSON values only.
func BlackboardTools(formatter Formatter) tool.Facade {
	if formatter == nil {
		formatter = DefaultFormatter
	}
	format := func(e tool.Entry) string {
		if e.IsBlob() {
			return BlobText(e)
		}
		return formatter(e)
	}
	nameParam := schema.Params(schema.String("name", "The binding name of the object (e.g., 'user' or 'searchResults')"))
	typeParam := schema.Params(schema.String("typeName", "The type name (e.g., 'User' or 'com.example.User')"))
	withBoard := func(fn func(b Blackboard, input string) string) func(ctx context.Context, input string) (tool.Result, error) {
		return func(ctx context.Context, input string) (tool.Result, error) {
			p := FromContext(ctx)
			if p == nil {
				return tool.Text(noProcessBlackboard), nil
			}
			return tool.Text(fn(p.Snapshot().Blackboard, input)), nil
		}
	}
	children := []tool.Tool{
		tool.New("blackboard_list", "List all objects on the blackboard with their types and positions", schema.Empty(), withBoard(func(b Blackboard, _ string) string {
			if len(b.Entries) == 0 {
				return "Blackboard is empty - no objects available."
			}
			out := []string{fmt.Sprintf("Blackboard contains %d object(s):", len(b.Entries))}
			for i, e := range b.Entries {
				line := fmt.Sprintf("[%d] %s", i, typeLabel(e))
				if e.IsBlob() {
					line += fmt.Sprintf(" (%s, %d bytes)", e.MediaType, len(e.Data))
				}
				out = append(out, line)
			}
			return lines(out...)
		})),
		tool.New("blackboard_get", "Get an object by its binding name", nameParam, withBoard(byName(format, "%s bound to '%s':\n%s"))),
		tool.New("blackboard_last", "Get the most recent object of a type", typeParam, withBoard(func(b Blackboard, input string) string {
			typeName := stringParam(input, "typeName")
			if typeName == "" {
				return "Missing required parameter: typeName"
			}
			e, ok := b.Last(typeName)
			if !ok {
				return fmt.Sprintf("No object of type '%s' found in blackboard", typeName)
			}
			return fmt.Sprintf("Last %s:\n%s", typeLabel(e), format(e))
		})),
		tool.New("blackboard_describe", "Get a detailed description of an object by its binding name", nameParam, withBoard(byName(format, "Description of %s '%s':\n%s"))),
		tool.New("blackboard_count", "Count the objects of a type on the blackboard", typeParam, withBoard(func(b Blackboard, input string) string {
			typeName := stringParam(input, "typeName")
			if typeName == "" {
				return "Missing required parameter: typeName"
			}
			return fmt.Sprintf("Found %d object(s) of type '%s' in blackboard", b.Count(typeName), typeName)
		})),
	}
	return tool.Of("blackboard",
		"Access objects in the current process context. Invoke to see available operations for listing, getting, and describing objects.",
		children,
		tool.UsageNotes("Use blackboard_list to see what's available. Use blackboard_get for named bindings, blackboard_last for the most recent of a type."))
}

// byName answers a lookup by binding name with text, a format of the type label, the
// name and the formatted entry.
func byName(format Formatter, text string) func(b Blackboard, input string) string {
	return func(b Blackboard, input string) string {
		name := stringParam(input, "name")
		if name == "" {
			return "Missing required parameter: name"
		}
		e, ok := b.Get(name)
		if !ok {
			return fmt.Sprintf("No object found with binding name '%s'", name)
		}
		return fmt.Sprintf(text, typeLabel(e), name, format(e))
	}
}

// ProgressTool reports a transient status to the user.
func ProgressTool() tool.Tool {
	in := schema.Params(schema.String("status", "Short progress message describing what you're currently doing"))
	return tool.New("progress", "Report progress to the user. Call this during long-running work to show what you're doing.", in,
		func(ctx context.Context, input string) (tool.Result, error) {
			var args struct {
				Status *string `json:"status"`
			}
			if err := json.Unmarshal([]byte(input), &args); err != nil {
				return tool.Error("invalid arguments: " + err.Error()), nil
			}
			if args.Status == nil {
				return tool.Error("Missing 'status' parameter"), nil
			}
			p := FromContext(ctx)
			if p == nil {
				return tool.Text("Progress noted (no active process to display it)."), nil
			}
			if err := p.Progress(OriginFrom(ctx, "progress"), *args.Status); err != nil {
				return tool.ErrorFrom(fmt.Errorf("the progress report did not reach the user: %w", err)), nil
			}
			return tool.Text("Progress reported: " + *args.Status), nil
		})
}

// CommunicateTool sends the user a message that stays in the conversation.
func CommunicateTool() tool.Tool {
	in := schema.Params(schema.String("message", "The message to send to the user"))
	return tool.New("communicate", "Send a permanent message to the user. Use this to report results, share links (e.g., PR URLs), or inform the user of important outcomes. Unlike progress, this creates a visible chat message.", in,
		func(ctx context.Context, input string) (tool.Result, error) {
			var args struct {
				Message *string `json:"message"`
			}
			if err := json.Unmarshal([]byte(input), &args); err != nil {
				return tool.Error("invalid arguments: " + err.Error()), nil
			}
			if args.Message == nil {
				return tool.Error("Missing 'message' parameter"), nil
			}
			p := FromContext(ctx)
			if p == nil {
				return tool.Text("Message noted (no active process to deliver it)."), nil
			}
			if err := p.Message(OriginFrom(ctx, "communicate"), *args.Message); err != nil {
				return tool.ErrorFrom(fmt.Errorf("the message was not delivered: %w", err)), nil
			}
			return tool.Text("Message sent to user."), nil
		})
}
