package toolinternal

import (
	"context"
	"encoding/json"
)

// Question is what a tool asks a person during its call: a message and the JSON Schema
// of the answer (an MCP server's elicitation, in either protocol revision).
type Question struct {
	// Message is what the person reads.
	Message string `json:"message"`
	// Schema is the JSON Schema the answer's content must satisfy (a flat object); empty
	// when the tool asks for no content (a confirmation).
	Schema json.RawMessage `json:"schema,omitempty"`
	// Tool is the tool that asks, Server the MCP server it runs on.
	Tool   string `json:"tool,omitempty"`
	Server string `json:"server,omitempty"`
	// Protocol is the MCP revision the question came in ("2025-11-25", "2026-07-28").
	Protocol string `json:"protocol,omitempty"`
}

// The actions of an Answer, as MCP names them.
const (
	AnswerAccept  = "accept"
	AnswerDecline = "decline"
	AnswerCancel  = "cancel"
)

// Answer is a person's answer to a Question: accept with Content, decline, or cancel
// (nobody answered in time, or the wait could not go on).
type Answer struct {
	Action  string          `json:"action"`
	Content json.RawMessage `json:"content,omitempty"`
	// Reason is why a person declined; By who answered ("deadline" for the deadline).
	Reason string `json:"reason,omitempty"`
	By     string `json:"-"`
}

// Asker puts the questions of the call in ctx to a person and waits for the answers: a
// run's approvals carry them, journaled, so that a wait survives a restart. n numbers
// the call's questions from 1, in the order the call asked them; a resumed run that asks
// question n again gets the journal's (its answer when one was given, else the wait goes
// on).
type Asker interface {
	Ask(ctx context.Context, n int, q Question) (Answer, error)
	// Waiting reports whether the call in ctx asked a question whose answer it had not
	// seen when its run stopped: sending the call again then repeats a call that waited
	// for a person, not one whose outcome is unknown.
	Waiting(ctx context.Context) bool
}

// AskerKey is the context key of the Asker that a call puts its questions to: a run's
// context answers it with the run's.
type AskerKey struct{}

// WithAsker returns a context whose calls put their questions to a.
func WithAsker(ctx context.Context, a Asker) context.Context {
	return context.WithValue(ctx, AskerKey{}, a)
}

// AskerFrom returns the Asker in ctx, or nil.
func AskerFrom(ctx context.Context) Asker {
	a, _ := ctx.Value(AskerKey{}).(Asker)
	return a
}
