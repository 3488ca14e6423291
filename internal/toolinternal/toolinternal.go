// Package toolinternal holds what the engine (the orchestrator's loop and router, the
// worker SDK) shares with the public tool model but tool authors never set: the context
// keys under which a call's identity and state travel, the record that a call's
// arguments were validated, the record of where a call was dispatched, and the text a
// facade answers the model with.
//
// It imports only the standard library, so that pkg/tool can import it.
package toolinternal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// CallInfoKey is the context key of a call's tool.CallInfo.
type CallInfoKey struct{}

// StateKey is the context key of the *tool.State a call is bound to.
type StateKey struct{}

// BagKey is the context key of a call's toolctx.Context.
type BagKey struct{}

// ValidatedKey is the context key of a call's validated arguments (see WithValidated).
type ValidatedKey struct{}

// WithValidated records in ctx that input is canonical arguments already validated
// against the called tool's own input schema, so that the tool need not validate them
// again. The worker SDK and the orchestrator's loop validate every call before they
// dispatch it; validating twice was a sizeable part of a call's cost.
func WithValidated(ctx context.Context, input string) context.Context {
	return context.WithValue(ctx, ValidatedKey{}, input)
}

// Validated reports whether ctx records input as validated (see WithValidated).
func Validated(ctx context.Context, input string) bool {
	switch v := ctx.Value(ValidatedKey{}).(type) {
	case string:
		return v == input
	case *string: // a call scope's (toolcall.Scope)
		return *v == input
	}
	return false
}

// Dispatch records where a call was executed. A tool that sends calls elsewhere (a
// remote tool) fills in the Dispatch it finds in the context, so that the caller can
// report it.
type Dispatch struct {
	// WorkerID is the worker that produced the result; empty when none was contacted.
	WorkerID string
	// Attempts is the number of workers the call was sent to.
	Attempts int
	// Unknown says that the last attempt left and no answer came back: the call may
	// have run (its outcome is outcome_unknown).
	Unknown bool
	// Direct says that the result came from a tool that returns its result directly to
	// the caller, other than the one called: a facade's shortcut to a return-direct child.
	Direct bool
	// Took is how long the call took where it was sent (toolcall.Journaled measures it,
	// and the journal records it), which the caller reports rather than its own measure.
	// Replayed says that the run's journal answered the call: Took, WorkerID and
	// Attempts are then as they were the first time.
	Took     time.Duration
	Replayed bool
}

// DispatchKey is the context key of a call's *Dispatch.
type DispatchKey struct{}

// WithDispatch returns a context carrying a fresh Dispatch for the callee to fill in.
func WithDispatch(ctx context.Context) (context.Context, *Dispatch) {
	d := &Dispatch{}
	return context.WithValue(ctx, DispatchKey{}, d), d
}

// DispatchFrom returns the Dispatch in ctx, or nil.
func DispatchFrom(ctx context.Context) *Dispatch {
	d, _ := ctx.Value(DispatchKey{}).(*Dispatch)
	return d
}

// UnfoldMessage is what calling a facade answers the model: the names of the selected
// tools, an order to call one of them, and the usage notes after a blank line when they
// are not blank.
func UnfoldMessage(selected []string, usageNotes string) string {
	s := "Tools now available: " + strings.Join(selected, ", ") +
		". You MUST call one of these tools to complete the user's request. Do NOT respond with text \u2014 call a tool."
	if strings.TrimSpace(usageNotes) != "" {
		s += "\n\n" + usageNotes
	}
	return s
}

// BlackboardKey is the context key of the run's tool.Blackboard.
type BlackboardKey struct{}

// ProgressKey is the context key of the func(string) a call's progress reports go to.
type ProgressKey struct{}

// ValidText is s with each byte that is not part of UTF-8 replaced by U+FFFD, as
// encoding/json writes such a string (and so as the run's journal keeps it): s itself
// when it is valid, as it nearly always is.
func ValidText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Truncate cuts a tool result's text to at most max bytes, note included, at a character
// boundary; the note tells the model how long the text was and how much it sees.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	marker := fmt.Sprintf("\n[truncated: the tool returned %d bytes; only the first %%d are shown]", len(s))
	keep := max - len(marker) - 8 // room for the digits of the count
	if keep < 0 {
		keep = 0
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + fmt.Sprintf(marker, keep)
}

// ErrNotSent is a Journal's refusal of a dispatch whose context ended before it: the
// call is not sent, nothing is recorded, and its result says why (toolcall.JournalFailed).
var ErrNotSent = errors.New("not sent")

// Journal is the run journal as a tool that dispatches calls elsewhere (a remote or an
// MCP tool) sees it: before a call leaves it records the dispatch, when the call ends its
// outcome, and before either it asks whether the call already has an outcome, which a
// run resumed after a crash replays instead of sending the call again. The call is the
// one of the context (its tool.CallInfo).
type Journal interface {
	// Recorded reports what the journal holds for the call: the outcome data recorded
	// with Finished (done), or that the call was dispatched and has no outcome.
	Recorded(ctx context.Context) (data []byte, done, dispatched bool)
	// Dispatched records, durably, that attempt attempt of the call goes to worker. The
	// call must not leave when it fails; it fails with ErrNotSent when the call's context
	// ended first (a resumed run's deadline, held while it replayed, passed).
	Dispatched(ctx context.Context, worker string, attempt int) error
	// Finished records, durably, the call's terminal outcome (one of the Outcome
	// constants) and data the tool replays it from. idempotent says that the call may be
	// sent again with its key, answering as it did (the worker's ledger): its record
	// then need not be on disk before the model is asked its next step, since a run
	// resumed without it sends the call again.
	Finished(ctx context.Context, outcome string, data []byte, idempotent bool) error
	// Damaged reports that data Recorded handed out cannot be read back: the run stops
	// (the result of the call never reaches the model) and waits for an operator.
	Damaged(ctx context.Context, err error)
}

// The terminal outcomes of a dispatched call.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeTimedOut  = "timed_out"
	OutcomeCancelled = "cancelled"
	// OutcomeUnknown: the call was sent and nothing came back; it may have run.
	OutcomeUnknown = "outcome_unknown"
)

// JournalKey is the context key of the Journal that journals a call: a run's context
// answers it with the run's.
type JournalKey struct{}

// ReplayOnlyKey marks the context of a call a layer let through without its checks
// because the run's journal held the call's outcome (a resumed run's replay): the call
// may be answered from the journal, and is never sent.
type ReplayOnlyKey struct{}

// JournalFrom returns the Journal in ctx, or nil.
func JournalFrom(ctx context.Context) Journal {
	j, _ := ctx.Value(JournalKey{}).(Journal)
	return j
}

// MarshalJSON is json.Marshal without HTML escaping (which turns each <, > and & into six
// bytes): the form of the run journal's records, whose size is bounded. It encodes in a
// pooled buffer and returns a copy of exactly the encoding's size; an encoding larger
// than the pool keeps is returned in its own buffer instead, which is not pooled.
func MarshalJSON(v any) ([]byte, error) {
	e, _ := jsonEncoders.Get().(*jsonEncoder)
	if e == nil {
		e = &jsonEncoder{}
		e.enc = json.NewEncoder(&e.buf)
		e.enc.SetEscapeHTML(false)
	}
	err := e.enc.Encode(v)
	var out []byte
	switch {
	case err != nil:
	case e.buf.Cap() > maxPooledJSON:
		return bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")), nil
	default:
		out = bytes.Clone(bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")))
	}
	e.buf.Reset()
	if e.buf.Cap() <= maxPooledJSON {
		jsonEncoders.Put(e)
	}
	return out, err
}

// jsonEncoder is an encoder of MarshalJSON and the buffer it writes to.
type jsonEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

// jsonEncoders pools MarshalJSON's encoders; one whose buffer grew past maxPooledJSON
// (a large record) is dropped rather than kept.
var jsonEncoders sync.Pool

const maxPooledJSON = 64 << 10

// TenantKey is the context key of the verified tenant of the run a call belongs to (see
// WithTenant).
type TenantKey struct{}

// WithTenant records the run's verified tenant for the calls it makes: the orchestrator
// sends it with each call (InvokeRequest.tenant, MCP _meta) and vouches for it in each
// call's token, and toolctx.FromContext shows it under toolctx.TenantKey.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, TenantKey{}, tenant)
}

// TenantFrom is the verified tenant WithTenant recorded (or a call scope holds), if any.
func TenantFrom(ctx context.Context) string {
	t, _ := ctx.Value(TenantKey{}).(string)
	return t
}

// OnceKey marks the context of a call whose caller answers the repeated calls of a
// once-per-loop tool itself (the orchestrator, for a call it sent a worker): the tool
// runs every call it gets, the caller sending only the first of each loop (a re-send of
// it included). The worker SDK's call scope answers true for it.
type OnceKey struct{}

// OnceCountedUpstream reports whether ctx is so marked.
func OnceCountedUpstream(ctx context.Context) bool {
	v, _ := ctx.Value(OnceKey{}).(bool)
	return v
}

// NewState makes a *tool.State holding b, and StateChanged reports whether a tool
// replaced one: set by pkg/tool, whose State has no exported constructor, and reached as
// toolcall.NewState and toolcall.StateChanged.
var (
	NewState     func(b []byte) any
	StateChanged func(s any) bool
)

// AdoptBag makes a toolctx.Context that holds m itself, set by pkg/toolctx: a decoder
// that built m for the context hands it over without the copy toolctx.FromMap makes, and
// must not change or keep m afterwards.
var AdoptBag func(m map[string]string) any

// SubjectKey is the context key of the bearer token the run's (or the MCP session's)
// caller authenticated with, as it presented it (see WithSubject).
type SubjectKey struct{}

// WithSubject records the caller's verified bearer token for the calls made on its
// behalf: a group whose credentials are exchanged for it (RFC 8693) reads it here. It
// lives in memory only: it is never journaled, logged or put on a span, so a run resumed
// by another orchestrator has none.
func WithSubject(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, SubjectKey{}, token)
}

// SubjectFrom is the bearer token WithSubject recorded, or "".
func SubjectFrom(ctx context.Context) string {
	t, _ := ctx.Value(SubjectKey{}).(string)
	return t
}
