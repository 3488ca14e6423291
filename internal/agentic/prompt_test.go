package agentic

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// A template that does not parse, or comes with a system prompt, is refused with the
// spec, naming the field.
func TestPromptTemplateRefused(t *testing.T) {
	for _, tc := range []struct {
		name, system, template, problem string
	}{
		{"unclosed action", "", "Brief on {{ .Input.topic", "unclosed action"},
		{"unknown function", "", `{{ env "HOME" }}`, `function "env" not defined`},
		{"no file access", "", `{{ readFile "/etc/passwd" }}`, `function "readFile" not defined`},
		{"unmatched end", "", "{{ end }}", "unexpected {{end}}"},
		{"over 16 KiB", "", strings.Repeat("x", MaxPromptTemplateBytes+1), "is 16385 bytes; the limit is 16384"},
		{"with a system prompt", "You brief.", "{{ .Default }}", "set at most one of system_prompt and system_prompt_template"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(Spec{Key: "agentic_tools[2]", Name: "brief", Description: "Brief.", Kind: KindSimple, Tools: []string{"a"},
				SystemPrompt: tc.system, SystemPromptTemplate: tc.template})
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != "agentic_tools[2].system_prompt_template" || !strings.Contains(fe.Problem, tc.problem) {
				t.Errorf("got %v, want agentic_tools[2].system_prompt_template: …%s…", err, tc.problem)
			}
		})
	}
}

// The config checks the same bound as the agentic tools.
func TestPromptTemplateBoundMatchesTheConfig(t *testing.T) {
	if config.MaxPromptTemplateBytes != MaxPromptTemplateBytes {
		t.Errorf("config bounds a template at %d bytes, agentic tools at %d", config.MaxPromptTemplateBytes, MaxPromptTemplateBytes)
	}
}

// promptCtx is a call's context in a run: its loop, its ToolCallContext, its blackboard
// and n as its Nester.
func promptCtx(t *testing.T, n *nester, bag toolctx.Context, board tool.Blackboard) context.Context {
	ctx := toolcall.WithCallInfo(WithNester(ctxT(t), n), tool.CallInfo{RunID: "run-1", LoopID: "loop-1"})
	return toolcall.WithBlackboard(toolctx.NewContext(ctx, bag), board)
}

// Each call renders the template over its input, the run's context (without what the
// run hides and without toolmesh's own keys) and blackboard, and the result is the
// nested loop's system prompt.
func TestPromptTemplateRendersEachCall(t *testing.T) {
	cat := &catalog{}
	cat.add("a", tool.Text("a"))
	n := newNester(t, scripted.Rule{Reply: scripted.Reply{Text: "ok"}})
	n.hidden = []string{"ssn"}
	tmpl := `{{.Tool}} ({{.Description}}) on {{.Input.topic}} <n={{.Input.n}}> for {{.Context.user}} in {{.Context.region}};` +
		` args {{.InputJSON}}; customer {{(last "Customer").name}}; missing {{json (last "Order")}};` +
		` types {{json .Blackboard.Types}};{{range .Blackboard.Entries}} {{.Type}}={{json .Value}}{{end}};` +
		` ctx{{range $k, $v := .Context}} {{$k}}={{$v}}{{end}}; depth {{default "shallow" (index .Input "depth")}}` + "\n{{.Default}}"
	at := compileOne(t, cat, Spec{Name: "brief", Description: "Brief a customer.", Tools: []string{"a"}, SystemPromptTemplate: tmpl,
		Context: toolctx.MustOf("region", "eu")})
	board := toolcall.NewCallBoard(nil, 1<<10)
	for _, e := range []struct {
		typ string
		v   any
	}{{"crm.Customer", map[string]any{"name": "Ada"}}, {"Note", "hi"}, {"crm.Customer", map[string]any{"name": "Grace"}}} {
		entry, _ := tool.NewEntry(e.typ, e.v)
		_ = board.Add(entry)
	}
	bag := toolctx.MustOf("user", "u-7", "ssn", "123-45-6789")
	ctx := promptCtx(t, n, bag, board)
	for _, input := range []string{`{"topic":"<renewal & pricing>","n":1000000}`, `{"topic":"churn","n":2.5,"depth":"deep"}`} {
		if res, err := at.Call(ctx, input); err != nil || res.IsError() {
			t.Fatalf("%+v, %v", res, err)
		}
	}
	want := []string{
		`brief (Brief a customer.) on <renewal & pricing> <n=1000000> for u-7 in eu; args {"topic":"<renewal & pricing>","n":1000000};` +
			` customer Grace; missing null; types ["crm.Customer","Note"]; crm.Customer={"name":"Ada"} Note="hi" crm.Customer={"name":"Grace"};` +
			` ctx region=eu user=u-7; depth shallow` + "\n" + DefaultSystemPrompt("Brief a customer."),
		`brief (Brief a customer.) on churn <n=2.5> for u-7 in eu; args {"topic":"churn","n":2.5,"depth":"deep"};` +
			` customer Grace; missing null; types ["crm.Customer","Note"]; crm.Customer={"name":"Ada"} Note="hi" crm.Customer={"name":"Grace"};` +
			` ctx region=eu user=u-7; depth deep` + "\n" + DefaultSystemPrompt("Brief a customer."),
	}
	if len(n.runs) != 2 {
		t.Fatalf("%d nested loops, want 2", len(n.runs))
	}
	for i, w := range want {
		if got := n.runs[i].System; got != w {
			t.Errorf("call %d: system prompt\n%q\nwant\n%q", i, got, w)
		}
		if strings.Contains(n.runs[i].System, "123-45-6789") || strings.Contains(n.runs[i].System, "loop-1") {
			t.Errorf("call %d: the prompt shows a hidden or reserved entry: %q", i, n.runs[i].System)
		}
	}
}

// A hidden key is as missing as an absent one: naming it fails the call.
func TestPromptTemplateCannotNameAHiddenKey(t *testing.T) {
	cat := &catalog{}
	cat.add("a", tool.Text("a"))
	n := newNester(t, scripted.Rule{Reply: scripted.Reply{Text: "ok"}})
	n.hidden = []string{"ssn"}
	at := compileOne(t, cat, Spec{Name: "leak", Description: "Leak.", Tools: []string{"a"}, SystemPromptTemplate: `{{.Context.ssn}}`})
	res, err := at.Call(promptCtx(t, n, toolctx.MustOf("ssn", "123-45-6789"), nil), `{}`)
	if err != nil || !res.IsError() || strings.Contains(res.Content, "123-45-6789") || !strings.Contains(res.Content, `map has no entry for key "ssn"`) {
		t.Errorf("%+v, %v", res, err)
	}
}

// A state machine's .Default is its default prompt for the state it starts in, which
// .State names; a reference name@STATE starts it elsewhere.
func TestPromptTemplateOfAStateMachine(t *testing.T) {
	cat := &catalog{}
	cat.add("a", tool.Text("a"))
	cat.add("b", tool.Text("b"))
	n := newNester(t, scripted.Rule{When: scripted.When{HasTool: "m", Turn: 1}, Reply: call("m")}, scripted.Rule{Reply: scripted.Reply{Text: "ok"}})
	machine := Spec{Name: "m", Description: "Check out.", Kind: KindStateMachine, Initial: "CART", SystemPromptTemplate: "[{{.State}}] {{.Default}}",
		States: []State{{Name: "CART", Tools: []StateTool{{Tool: "a", TransitionsTo: "PAY"}}}, {Name: "PAY", Tools: []StateTool{{Tool: "b"}}}}}
	at := compileOne(t, cat, Spec{Name: "outer", Description: "Outer.", Tools: []string{"m@PAY"}}, machine)
	if _, err := at.Call(promptCtx(t, n, toolctx.Empty, nil), `{}`); err != nil {
		t.Fatal(err)
	}
	if len(n.runs) != 2 || n.runs[1].System != "[PAY] "+StateMachineSystemPrompt("Check out.", "PAY") {
		t.Errorf("loops %+v", n.runs)
	}
}

// A rendering that fails is an error result that names the tool and the problem, and no
// nested loop starts.
func TestPromptTemplateFailures(t *testing.T) {
	for _, tc := range []struct {
		name, template, input, problem string
	}{
		{"missing input key", "On {{.Input.topic}}.", `{"subject":"x"}`, `map has no entry for key "topic"`},
		{"missing context key", "For {{.Context.user}}.", `{}`, `map has no entry for key "user"`},
		{"over 64 KiB", `{{range 100}}{{printf "%999s" "x"}}{{end}}`, `{}`, "the prompt is over 65536 bytes"},
		{"a function's value over 64 KiB", `{{$s := "ab"}}{{range 20}}{{$s = printf "%s%s" $s $s}}{{end}}ok`, `{}`, "the prompt is over 65536 bytes"},
		{"a json value over 64 KiB", `{{$s := "ab"}}{{range 15}}{{$s = print $s $s}}{{end}}{{if json $s}}ok{{end}}`, `{}`, "the prompt is over 65536 bytes"},
		{"functions make too much", `{{range 2000}}{{$s := printf "%999s" "x"}}{{end}}ok`, `{}`, "its functions make more than 1048576 bytes"},
		{"a long loop", `{{range 1000000000}}{{end}}ok`, `{}`, "it runs more than 10000 loop iterations and template calls"},
		{"nested loops", `{{range 200}}{{range 200}}{{end}}{{end}}ok`, `{}`, "it runs more than 10000 loop iterations and template calls"},
		{"recursion", `{{define "r"}}{{template "r"}}{{end}}{{template "r"}}`, `{}`, "it runs more than 10000 loop iterations and template calls"},
		{"printf width from an argument", `{{printf "%*d" 5 1}}`, `{}`, "printf: a width or precision taken from an argument (*) is not allowed"},
		{"printf width over 999", `{{printf "%1000d" 1}}`, `{}`, "printf: widths and precisions go up to 999"},
		{"empty", `{{if false}}x{{end}}  `, `{}`, "the prompt is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cat := &catalog{}
			cat.add("a", tool.Text("a"))
			n := newNester(t, scripted.Rule{Reply: scripted.Reply{Text: "ok"}})
			at := compileOne(t, cat, Spec{Name: "brief", Description: "Brief.", Tools: []string{"a"}, SystemPromptTemplate: tc.template,
				Parameters: schema.Params(schema.String("topic", "the topic"))})
			res, err := at.Call(promptCtx(t, n, toolctx.Empty, nil), tc.input)
			if err != nil || !res.IsError() || !strings.HasPrefix(res.Content, "agentic tool 'brief' was not run: its system_prompt_template failed: ") ||
				!strings.Contains(res.Content, tc.problem) {
				t.Errorf("%+v, %v; want an error result naming %q", res, err, tc.problem)
			}
			if len(n.runs) != 0 {
				t.Errorf("%d nested loops started", len(n.runs))
			}
		})
	}
}

// Widths and precisions up to the bound format as usual.
func TestPromptPrintf(t *testing.T) {
	p, err := ParsePrompt(`{{printf "%05.2f|%-4s|%%|%999s|%[1]v" 2.5 "ab" ""}}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Render(&Spec{Name: "x"}, "", "", PromptCall{})
	if want := "02.50|ab  |%|" + strings.Repeat(" ", 999) + "|2.5"; err != nil || got != want {
		t.Errorf("%q, %v; want %q", got, err, want)
	}
}

// An agent run directly renders over its prompt, which need not be JSON.
func TestPromptOverText(t *testing.T) {
	p, err := ParsePrompt(`Answer: {{.Input}} / {{.InputJSON}}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Render(&Spec{Name: "x", Kind: KindAgent}, "", "", PromptCall{Input: "what is 2+2?"})
	if want := "Answer: what is 2+2? / what is 2+2?"; err != nil || got != want {
		t.Errorf("%q, %v; want %q", got, err, want)
	}
}

// Under a Nester that does not say which keys are hidden, a template sees no context.
func TestPromptTemplateWithoutAHider(t *testing.T) {
	cat := &catalog{}
	cat.add("a", tool.Text("a"))
	n := newNester(t, scripted.Rule{Reply: scripted.Reply{Text: "ok"}})
	at := compileOne(t, cat, Spec{Name: "count", Description: "Count.", Tools: []string{"a"}, SystemPromptTemplate: `{{len .Context}} entries`})
	bag := toolctx.MustOf("user", "u-7", "region", "eu")
	for _, tc := range []struct {
		nester Nester
		want   string
	}{{n, "2 entries"}, {struct{ Nester }{n}, "0 entries"}} {
		ctx := toolctx.NewContext(WithNester(ctxT(t), tc.nester), bag)
		if res, err := at.Call(ctx, `{}`); err != nil || res.IsError() {
			t.Fatalf("%+v, %v", res, err)
		}
		if got := n.runs[len(n.runs)-1].System; got != tc.want {
			t.Errorf("%T: %q, want %q", tc.nester, got, tc.want)
		}
	}
}
