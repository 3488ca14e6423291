package loop

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/toolmesh/toolmesh/pkg/schema"
)

// OutputSchema is a compiled JSON Schema that a run's final answer must satisfy, when
// the run asks for a structured answer.
type OutputSchema struct{ v *schema.Value }

// ErrInvalidOutputSchema marks a schema that cannot be used.
var ErrInvalidOutputSchema = errors.New("invalid output schema")

// CompileOutputSchema parses and resolves a JSON Schema. Remote references, duplicate
// keys and unknown type names are refused.
func CompileOutputSchema(b []byte) (*OutputSchema, error) {
	v, err := schema.ValueFromJSON(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOutputSchema, strings.TrimPrefix(err.Error(), schema.ErrInvalid.Error()+": "))
	}
	return &OutputSchema{v: v}, nil
}

// JSON is the schema as compact JSON.
func (s *OutputSchema) JSON() json.RawMessage { return s.v.JSON() }

// Check validates an answer and returns it as canonical JSON. It accepts an answer
// wrapped in a Markdown code fence, which models add even when told not to.
func (s *OutputSchema) Check(answer string) (string, error) {
	out, err := s.v.Validate(unfence(strings.TrimSpace(answer)))
	if err != nil {
		return "", errors.New(strings.TrimPrefix(err.Error(), schema.ErrInvalidArguments.Error()+": "))
	}
	return out, nil
}

func unfence(s string) string {
	if !strings.HasPrefix(s, "```") || !strings.HasSuffix(s, "```") || len(s) < 6 {
		return s
	}
	body := strings.TrimSuffix(s[3:], "```")
	if i := strings.IndexByte(body, '\n'); i >= 0 && !strings.ContainsAny(body[:i], "{[\"") {
		body = body[i+1:] // drop a language tag such as "json"
	}
	return strings.TrimSpace(body)
}

// OutputSchemaError ends a run whose final answer did not satisfy the output schema, even
// after one corrective turn.
type OutputSchemaError struct{ Problem string }

func (e *OutputSchemaError) Error() string {
	return "the final answer does not satisfy the output schema: " + e.Problem
}

// correction is the user message of the one corrective turn.
func correction(problem string) string {
	return fmt.Sprintf("Your answer cannot be used: %s. Reply again with only a JSON value that matches the required JSON schema, with no other text.", problem)
}

// BudgetExceededError stops a run that used more tokens or money than it was given.
type BudgetExceededError struct {
	// What is "tokens", "cost" or "actions".
	What        string
	Used, Limit float64
	// Tool is the call that was not run, for an action budget.
	Tool string
}

func (e *BudgetExceededError) Error() string {
	if e.What == "actions" {
		return fmt.Sprintf("run budget exceeded: the action budget of %.0f tool calls is used up; tool '%s' was not run", e.Limit, e.Tool)
	}
	if e.What == "cost" {
		return fmt.Sprintf("run budget exceeded: model calls cost $%.6f, over the limit of $%.6f", e.Used, e.Limit)
	}
	return fmt.Sprintf("run budget exceeded: model calls used %.0f tokens, over the limit of %.0f", e.Used, e.Limit)
}

// Budget bounds what a loop may spend: tokens and cost of its model calls, and its
// actions (dispatched tool calls). Zero fields mean no limit.
type Budget struct {
	MaxTokens  int64
	MaxCostUSD float64
	MaxActions int
	// Shared, when set, is what several loops spend together (the loops of one run:
	// nested loops count against the run's budget): each loop adds to it and checks the
	// limits against its totals instead of its own spending.
	Shared *Spending
}

// Spending is what loops that share a budget have spent; safe for concurrent use.
type Spending struct {
	mu      sync.Mutex
	tokens  int64
	cost    float64
	actions int
	// exceeded is the first budget error of a loop sharing the budget.
	exceeded error
}

// Exceeded is the budget error a loop sharing the budget stopped with, if any: the
// other loops stop with it at their next model call.
func (s *Spending) Exceeded() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exceeded
}

// exceed records a loop's budget error; s may be nil.
func (s *Spending) exceed(err error) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exceeded == nil {
		s.exceeded = err
	}
}

// Totals are the tokens, cost and actions spent so far.
func (s *Spending) Totals() (tokens int64, costUSD float64, actions int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokens, s.cost, s.actions
}

func (s *Spending) addModel(tokens int64, cost float64) (int64, float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens += tokens
	s.cost += cost
	return s.tokens, s.cost
}

func (s *Spending) addActions(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.actions += n
}
