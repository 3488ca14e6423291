package agentic

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Catalog resolves the sub-tools a spec names.
type Catalog interface {
	// Tool is the tool of a name, undecorated.
	Tool(name string) (tool.Tool, bool)
	// Group is what the group of a role offers, undecorated.
	Group(role string) ([]tool.Tool, bool)
	// Serves reports, cheaply (connecting nothing), whether a tool of that name is served
	// besides agentic tools: an agentic tool may not take the name.
	Serves(name string) bool
}

// Check refuses a spec that is wrong in itself, whatever the mesh serves: names, kinds,
// bounds, locks and states that do not fit together, CEL that does not compile.
func Check(s Spec) error {
	k := s.Key
	switch {
	case !nameRE.MatchString(s.Name):
		return fieldErr(k+".name", "%q is not a tool name (1 to 64 of a-z, A-Z, 0-9, _ and -)", s.Name)
	case strings.TrimSpace(s.Description) == "" && s.Kind != KindAgent:
		return fieldErr(k+".description", "an agentic tool needs a description: it is the nested loop's task")
	case s.MaxIterations < 0:
		return fieldErr(k+".max_iterations", "must not be negative")
	case len(s.Tools) > MaxTools:
		return fieldErr(k+".tools", "%d tools; the limit is %d", len(s.Tools), MaxTools)
	case len(s.Groups) > MaxTools:
		return fieldErr(k+".tool_groups", "%d groups; the limit is %d", len(s.Groups), MaxTools)
	case len(s.Locks) > MaxLocks:
		return fieldErr(k+".locked_tools", "%d locked tools; the limit is %d", len(s.Locks), MaxLocks)
	case len(s.States) > MaxStates:
		return fieldErr(k+".state_machine.states", "%d states; the limit is %d", len(s.States), MaxStates)
	}
	for i, t := range s.Tools {
		name, state, at := strings.Cut(t, "@")
		if !nameRE.MatchString(name) || (at && !stateRE.MatchString(state)) {
			return fieldErr(indexed(k+".tools", i), "%q is not a tool name (or name@STATE for a state machine starting in STATE)", t)
		}
	}
	if _, err := CompileSources(k+".chaining_sources", s.Chaining); err != nil {
		return err
	}
	if s.SystemPromptTemplate != "" {
		if s.SystemPrompt != "" {
			return fieldErr(k+".system_prompt_template", "set at most one of system_prompt and system_prompt_template")
		}
		if _, err := ParsePrompt(s.SystemPromptTemplate); err != nil {
			return fieldErr(k+".system_prompt_template", "%v", err)
		}
	}
	if err := checkOutput(s); err != nil {
		return err
	}
	if s.Kind != KindPlaybook && len(s.Locks) > 0 {
		return fieldErr(k+".locked_tools", "only a playbook has locked tools; this tool is %s", kindName(s.Kind))
	}
	if s.Kind != KindStateMachine && (len(s.States) > 0 || s.Initial != "") {
		return fieldErr(k+".state_machine", "only a state machine has states; this tool is %s", kindName(s.Kind))
	}
	switch s.Kind {
	case KindSimple, KindAgent:
	case KindPlaybook:
		return checkLocks(s)
	case KindStateMachine:
		return checkStates(s)
	default:
		return fieldErr(k+".kind", "unknown kind %q (simple, playbook, state_machine or agent)", s.Kind)
	}
	return nil
}

// checkOutput refuses an output schema that is not an object's JSON Schema, one on
// another kind than an agent, and an output type without a schema.
func checkOutput(s Spec) error {
	field := s.Key + "." + cmpOr(s.OutputSchemaField, "output_schema")
	switch {
	case s.OutputSchema == "" && s.OutputType != "":
		return fieldErr(s.Key+".output_type", "names the type of an agent's result object; set %s too", cmpOr(s.OutputSchemaField, "output_schema"))
	case s.OutputSchema == "":
		return nil
	case s.Kind != KindAgent:
		return fieldErr(field, "only an agent returns a result object; this tool is %s", kindName(s.Kind))
	case len(s.OutputType) > MaxOutputTypeBytes:
		return fieldErr(s.Key+".output_type", "is %d bytes; the limit is %d", len(s.OutputType), MaxOutputTypeBytes)
	case s.OutputType != "" && strings.TrimSpace(s.OutputType) != s.OutputType:
		return fieldErr(s.Key+".output_type", "%q has spaces around it", s.OutputType)
	}
	_, err := compileOutput(s.OutputSchema)
	if err != nil {
		return fieldErr(field, "%v", err)
	}
	return nil
}

// CheckOutputSchema refuses an output schema that is over its bound or is not the JSON
// Schema of an object.
func CheckOutputSchema(text string) error {
	_, err := compileOutput(text)
	return err
}

// compileOutput compiles an agent's output schema: at most MaxOutputSchemaBytes, a JSON
// Schema whose type is object.
func compileOutput(text string) (*loop.OutputSchema, error) {
	if len(text) > MaxOutputSchemaBytes {
		return nil, fmt.Errorf("is %d bytes; the limit is %d", len(text), MaxOutputSchemaBytes)
	}
	var head struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal([]byte(text), &head); err != nil {
		return nil, fmt.Errorf("is not a JSON object: %v", err)
	}
	if head.Type != "object" {
		return nil, fmt.Errorf(`must be the JSON Schema of an object ("type": "object"), got type %v`, head.Type)
	}
	return loop.CompileOutputSchema([]byte(text))
}

func kindName(k Kind) string {
	if k == "" {
		return "simple"
	}
	return string(k)
}

func indexed(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

func checkLocks(s Spec) error {
	seen := map[string]bool{}
	for i, l := range s.Locks {
		f := indexed(s.Key+".locked_tools", i)
		if !nameRE.MatchString(l.Tool) {
			return fieldErr(f+".tool", "%q is not a tool name", l.Tool)
		}
		if seen[l.Tool] {
			return fieldErr(f+".tool", "%q is locked twice", l.Tool)
		}
		seen[l.Tool] = true
		for _, names := range []struct {
			field string
			names []string
		}{{"after_all", l.AfterAll}, {"after_any", l.AfterAny}} {
			for j, n := range names.names {
				if !nameRE.MatchString(n) {
					return fieldErr(indexed(f+"."+names.field, j), "%q is not a tool name", n)
				}
				if n == l.Tool {
					return fieldErr(indexed(f+"."+names.field, j), "%q cannot unlock itself", n)
				}
			}
		}
		if len(l.AfterAll) == 0 && len(l.AfterAny) == 0 && l.ArtifactType == "" && l.BlackboardType == "" && l.When == "" {
			return fieldErr(f, "a locked tool needs a condition: after_all, after_any, artifact_type, blackboard_type or when")
		}
		if l.When != "" {
			if _, err := compilePredicate(l.When); err != nil {
				return fieldErr(f+".when", "%v", err)
			}
		}
	}
	return nil
}

func checkStates(s Spec) error {
	k := s.Key + ".state_machine"
	if s.Initial == "" {
		return fieldErr(k+".initial_state", "a state machine needs an initial state")
	}
	if len(s.States) == 0 {
		return fieldErr(k+".states", "a state machine needs states")
	}
	declared := map[string]bool{}
	for i, st := range s.States {
		if !stateRE.MatchString(st.Name) {
			return fieldErr(indexed(k+".states", i)+".name", "%q is not a state name (a letter, then up to 63 of a-z, A-Z, 0-9, _ and -)", st.Name)
		}
		if declared[st.Name] {
			return fieldErr(indexed(k+".states", i)+".name", "state %q is declared twice", st.Name)
		}
		declared[st.Name] = true
	}
	if !declared[s.Initial] {
		return fieldErr(k+".initial_state", "%q is not one of the states (%s)", s.Initial, strings.Join(stateNames(s), ", "))
	}
	used := map[string]bool{s.Initial: true}
	global := map[string]bool{}
	for _, g := range s.Tools {
		n, _, _ := strings.Cut(g, "@")
		global[n] = true
	}
	for i, st := range s.States {
		if len(st.Tools) > MaxTools {
			return fieldErr(indexed(k+".states", i)+".tools", "%d tools; the limit is %d", len(st.Tools), MaxTools)
		}
		names := map[string]bool{}
		for j, t := range st.Tools {
			f := indexed(indexed(k+".states", i)+".tools", j)
			if !nameRE.MatchString(t.Tool) {
				return fieldErr(f+".tool", "%q is not a tool name", t.Tool)
			}
			if names[t.Tool] {
				return fieldErr(f+".tool", "%q is listed twice in state %s", t.Tool, st.Name)
			}
			names[t.Tool] = true
			if global[t.Tool] {
				return fieldErr(f+".tool", "%q is a global tool of this state machine (in tools); a tool is either global or bound to states", t.Tool)
			}
			if t.TransitionsTo != "" {
				if !declared[t.TransitionsTo] {
					return fieldErr(f+".transitions_to", "%q is not one of the states (%s)", t.TransitionsTo, strings.Join(stateNames(s), ", "))
				}
				used[t.TransitionsTo] = true
			}
		}
		if len(st.Tools) > 0 {
			used[st.Name] = true
		}
	}
	for i, st := range s.States {
		if !used[st.Name] {
			return fieldErr(indexed(k+".states", i)+".name", "state %q has no tools, is not the initial state and no tool transitions to it", st.Name)
		}
	}
	return nil
}

func stateNames(s Spec) []string {
	var out []string
	for _, st := range s.States {
		out = append(out, st.Name)
	}
	return out
}

// Compile builds the agentic tools named by want from specs, with the sub-tools cat
// resolves; an agentic tool a wanted one contains is built too. Every spec is checked
// (Check) first. A sub-tool nobody serves, an agentic tool that contains itself, or a
// state that a name@STATE reference names but the machine lacks is refused, naming the
// field. The tools come back in the order of want.
func Compile(specs []Spec, want []string, cat Catalog) ([]tool.Tool, error) {
	c := &compiler{specs: map[string]*Spec{}, cat: cat, built: map[string]*agenticTool{}}
	for i := range specs {
		s := &specs[i]
		if s.Kind == "" {
			s.Kind = KindSimple
		}
		if err := Check(*s); err != nil {
			return nil, err
		}
		if prev, dup := c.specs[s.Name]; dup {
			return nil, fieldErr(s.Key+".name", "%q is also the name of %s", s.Name, prev.Key)
		}
		c.specs[s.Name] = s
	}
	out := make([]tool.Tool, 0, len(want))
	for _, name := range want {
		if _, ok := c.specs[name]; !ok {
			return nil, fmt.Errorf("agentic: no spec named %q", name)
		}
		t, err := c.build(name, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

type compiler struct {
	specs map[string]*Spec
	cat   Catalog
	built map[string]*agenticTool
}

// build builds the agentic tool of a name; path is the chain of agentic tools that
// contain it.
func (c *compiler) build(name string, path []string) (*agenticTool, error) {
	if t, ok := c.built[name]; ok {
		return t, nil
	}
	s := c.specs[name]
	path = append(path, name)
	a := &agenticTool{spec: s}
	a.sources, _ = CompileSources(s.Key+".chaining_sources", s.Chaining) // checked
	if s.OutputSchema != "" {
		a.output, _ = compileOutput(s.OutputSchema) // checked
	}
	if s.SystemPromptTemplate != "" {
		a.prompt, _ = ParsePrompt(s.SystemPromptTemplate) // checked
	}
	resolve := func(field, ref string) ([]sub, error) {
		n, state, at := strings.Cut(ref, "@")
		if _, ok := c.specs[n]; ok {
			if c.cat.Serves(n) {
				return nil, fieldErr(field, "%q names both an agentic tool and a tool the mesh serves: rename the agentic tool", n)
			}
			if i := slices.Index(path, n); i >= 0 {
				return nil, fieldErr(field, "agentic tool %q contains itself (%s)", n, strings.Join(append(path[i:], n), " → "))
			}
			inner, err := c.build(n, path)
			if err != nil {
				return nil, err
			}
			if at {
				if inner.spec.Kind != KindStateMachine {
					return nil, fieldErr(field, "%q is not a state machine: only a state machine can start in a state", n)
				}
				if !slices.Contains(stateNames(*inner.spec), state) {
					return nil, fieldErr(field, "state machine %q has no state %q (%s)", n, state, strings.Join(stateNames(*inner.spec), ", "))
				}
				return []sub{{t: inner.startingIn(state), agentic: true}}, nil
			}
			return []sub{{t: inner, agentic: true}}, nil
		}
		if at {
			return nil, fieldErr(field, "%q is not a state machine of this request or the config", n)
		}
		t, ok := c.cat.Tool(n)
		if !ok {
			return nil, fieldErr(field, "unknown tool %q: no worker, MCP server or built-in group serves it, and no agentic tool has that name", n)
		}
		return []sub{{t: t}}, nil
	}
	for i, ref := range s.Tools {
		subs, err := resolve(indexed(s.Key+".tools", i), ref)
		if err != nil {
			return nil, err
		}
		a.tools = append(a.tools, subs...)
	}
	for i, role := range s.Groups {
		ts, ok := c.cat.Group(role)
		if !ok || len(ts) == 0 {
			return nil, fieldErr(indexed(s.Key+".tool_groups", i), "no tools in group %q", role)
		}
		for _, t := range ts {
			a.tools = append(a.tools, sub{t: t})
		}
	}
	for i, l := range s.Locks {
		subs, err := resolve(indexed(s.Key+".locked_tools", i)+".tool", l.Tool)
		if err != nil {
			return nil, err
		}
		cond, err := lockCondition(l)
		if err != nil {
			return nil, fieldErr(indexed(s.Key+".locked_tools", i)+".when", "%v", err)
		}
		subs[0].lock = cond
		a.tools = append(a.tools, subs[0])
	}
	for i, st := range s.States {
		for j, t := range st.Tools {
			subs, err := resolve(indexed(indexed(s.Key+".state_machine.states", i)+".tools", j)+".tool", t.Tool)
			if err != nil {
				return nil, err
			}
			a.addStateTool(subs[0], st.Name, t.TransitionsTo)
		}
	}
	if len(a.tools) == 0 && len(a.stateTools) == 0 {
		return nil, fieldErr(s.Key+".tools", "an agentic tool needs sub-tools")
	}
	if err := a.dedupe(); err != nil {
		return nil, err
	}
	c.built[name] = a
	return a, nil
}
