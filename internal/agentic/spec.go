package agentic

import (
	"fmt"
	"regexp"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Kind is the kind of an agentic tool.
type Kind string

// The kinds of agentic tool.
const (
	KindSimple       Kind = "simple"
	KindPlaybook     Kind = "playbook"
	KindStateMachine Kind = "state_machine"
	// KindAgent is a subagent: a simple tool whose loop is a child run (see Loop.Child).
	KindAgent Kind = "agent"
)

// Spec declares an agentic tool.
type Spec struct {
	// Key names the spec where errors point: "agentic_tools[0]" in a request,
	// "agentic_tools.<name>" in the config.
	Key         string
	Name        string
	Description string
	Kind        Kind
	// Parameters is the tool's input schema; empty means an object without properties.
	// The model's arguments, as JSON, are the nested loop's user message.
	Parameters schema.Schema
	// SystemPrompt of the nested loop; empty means the kind's default, or the rendered
	// SystemPromptTemplate. At most one of the two is set.
	SystemPrompt string
	// SystemPromptTemplate is the nested loop's system prompt as a template (see
	// ParsePrompt), rendered for each call over its arguments, the run's context and
	// blackboard.
	SystemPromptTemplate string
	// Model is "provider/model", Role a configured model role; both empty mean the run's.
	Model, Role string
	// MaxIterations bounds the nested loop's model calls; zero means 20.
	MaxIterations int
	// Temperature and MaxOutputTokens of the nested loop's model calls; unset means the
	// run's.
	Temperature     *float64
	MaxOutputTokens int
	// Tools are sub-tools by name: a tool of the mesh, a built-in tool, or another agentic
	// tool (a state machine as "name@STATE" starts in STATE). Groups are sub-tools by role.
	// In a state machine they are its global tools, available in every state.
	Tools  []string
	Groups []string
	// CaptureNestedArtifacts makes a simple agentic tool return the artifacts of the
	// agentic tools it calls as well as those of its other sub-tools.
	CaptureNestedArtifacts bool
	// Context is the interaction level of the nested loop's ToolCallContext: it wins over
	// the run's.
	Context toolctx.Context
	// Locks are a playbook's locked tools (the others are unlocked from the start).
	Locks []Lock
	// Chaining restricts which returned objects bind for tool chaining in the nested
	// loop (none: the run's sources); ChainFromAny adds the methods of an object's type
	// to the nested loop once it binds.
	Chaining     []ChainingSpec
	ChainFromAny bool
	// Initial and States describe a state machine.
	Initial string
	States  []State
	// OutputSchema is an agent's result object: a JSON Schema (of an object) that the
	// nested loop's final answer must satisfy; the tool then returns the answer as an
	// artifact of type OutputType (default: the agent's name). Empty for free text.
	OutputSchema string
	OutputType   string
	// OutputSchemaField is the key of OutputSchema where errors point: "output_schema"
	// in the config (the default), "output_schema_json" in a request.
	OutputSchemaField string
}

// ChainingSpec takes returned objects of Type for tool chaining, when When (a CEL
// predicate over value and type_name) holds for them.
type ChainingSpec struct {
	Type, When string
}

// Lock keeps a playbook's tool locked until its condition holds. When several fields are
// set, all of their conditions must hold.
type Lock struct {
	Tool string
	// AfterAll unlocks once every one of these tools has run; AfterAny once one has.
	AfterAll, AfterAny []string
	// ArtifactType unlocks once a sub-tool produced an artifact of this type.
	ArtifactType string
	// BlackboardType unlocks once the run's blackboard holds an object of this type.
	BlackboardType string
	// When is a CEL predicate over `called` (names of the tools that ran), `artifacts`
	// (what they produced) and `blackboard` (the run's blackboard), both lists of
	// {type, value}, and `iteration` (the tool calls that ran).
	When string
}

// State is a state of a state machine and the tools available in it.
type State struct {
	Name  string
	Tools []StateTool
}

// StateTool is a tool available in a state; after it succeeds the machine moves to
// TransitionsTo, when set.
type StateTool struct {
	Tool          string
	TransitionsTo string
}

// FieldError is a spec refused: Field names it as the request or the config does.
type FieldError struct {
	Field, Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Bounds of a spec.
const (
	MaxTools  = 256
	MaxStates = 64
	MaxLocks  = 256
	// MaxOutputSchemaBytes bounds an agent's output schema, as a run's is bounded.
	MaxOutputSchemaBytes = 64 << 10
	// MaxOutputTypeBytes bounds the type name of an agent's result object.
	MaxOutputTypeBytes = 256
)

var (
	nameRE  = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	stateRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)
)
