package toolcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/internal/failpoint"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// UnknownOutcome is the result of a call that a resumed run finds dispatched without an
// outcome, when its tool is not idempotent: it is not sent again, and the model is told
// it may have run.
func UnknownOutcome(name string) tool.Result {
	return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("the outcome of tool '%s' is unknown: the orchestrator running this call stopped before it answered. It may or may not have taken effect; check before calling it again.", name))
}

// JournalFailed is the result of a call the journal could not record: it was not sent,
// or its outcome is not recorded, and the run stops. A dispatch the journal refused
// because the call's context had ended (toolinternal.ErrNotSent) says so instead.
func JournalFailed(name string, err error) tool.Result {
	if errors.Is(err, toolinternal.ErrNotSent) {
		if errors.Is(err, context.DeadlineExceeded) {
			return tool.ErrorWithCode(tool.CodeTimeout, fmt.Sprintf("tool '%s' was not sent: the run's deadline passed", name))
		}
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' was not sent: it was cancelled before it left", name))
	}
	return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' was not run: the run's journal failed: %v", name, err))
}

// resultRecord is a tool result as the journal keeps it: what the model reads, its
// code, its artifact (its value form stays in process) and its parts (an MCP server's
// images, audio and resources), which a resumed run gives the model again as they came.
// Nothing is kept twice: the text of a result with parts is left out when it is the
// parts' text (Parts.Text), and an artifact's bytes when they are a part's (ArtPart).
type resultRecord struct {
	Kind     tool.ResultKind `json:"kind"`
	Content  string          `json:"content,omitempty"`
	Code     tool.ErrorCode  `json:"code,omitempty"`
	TypeName string          `json:"artifact_type,omitempty"`
	JSON     json.RawMessage `json:"artifact_json,omitempty"`
	// JSONBytes is an artifact's JSON as the tool gave it when it is not compact JSON
	// (indented, say): in JSON it would be compacted, and a replay would put other bytes
	// on the blackboard.
	JSONBytes []byte `json:"artifact_json_bytes,omitempty"`
	Data      []byte `json:"artifact_data,omitempty"`
	MediaType string `json:"artifact_media_type,omitempty"`
	HasArt    bool   `json:"artifact,omitempty"`
	// ArtPart, when set, is 1 + the index of the part whose bytes the artifact's are.
	ArtPart int          `json:"artifact_part,omitempty"`
	Parts   []partRecord `json:"parts,omitempty"`
	// PartsText says that the content is the parts' text.
	PartsText bool `json:"parts_text,omitempty"`
}

// partRecord is a tool.Part as the journal keeps it; Blob says that Data is set (an
// empty blob is not an absent one: a resource with neither reads as its URI).
type partRecord struct {
	Kind      tool.PartKind `json:"kind"`
	Text      string        `json:"text,omitempty"`
	Data      []byte        `json:"data,omitempty"`
	Blob      bool          `json:"blob,omitempty"`
	MediaType string        `json:"media_type,omitempty"`
	URI       string        `json:"uri,omitempty"`
	Name      string        `json:"name,omitempty"`
}

// EncodeResult is res as the journal records it.
func EncodeResult(res tool.Result) []byte {
	r := resultRecord{Kind: res.Kind, Content: res.Content, Code: res.Code}
	parts := res.Parts.List()
	if len(parts) > 0 {
		r.Parts = make([]partRecord, len(parts))
		for i, p := range parts {
			r.Parts[i] = partRecord{Kind: p.Kind, Text: p.Text, Data: p.Data, Blob: p.Data != nil, MediaType: p.MediaType, URI: p.URI, Name: p.Name}
		}
		if res.Content == res.Parts.Text() {
			r.Content, r.PartsText = "", true
		}
	}
	if a := res.Artifact; a != nil {
		r.HasArt, r.TypeName, r.Data, r.MediaType = true, a.TypeName, a.Data, a.MediaType
		if i := partOf(parts, a.Data); i >= 0 {
			r.Data, r.ArtPart = nil, i+1
		}
		switch {
		case len(a.JSON) > 0 && compactJSON(a.JSON):
			r.JSON = a.JSON
		case len(a.JSON) > 0:
			r.JSONBytes = a.JSON
		case a.Value != nil && len(a.Data) == 0:
			if b, err := json.Marshal(a.Value); err == nil {
				r.JSON = b
			}
		}
	}
	b, _ := toolinternal.MarshalJSON(r)
	return b
}

// compactJSON reports whether b is valid JSON that encoding/json keeps as it is (it
// compacts what it is given as raw JSON).
func compactJSON(b []byte) bool {
	if !json.Valid(b) {
		return false
	}
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil {
		return false
	}
	return bytes.Equal(c.Bytes(), b)
}

// partOf is the index of the part whose bytes are data, -1 if none is (or data is empty).
func partOf(parts []tool.Part, data []byte) int {
	if len(data) == 0 {
		return -1
	}
	for i, p := range parts {
		if bytes.Equal(p.Data, data) {
			return i
		}
	}
	return -1
}

// DecodeResult is the result EncodeResult recorded.
func DecodeResult(b []byte) (tool.Result, error) {
	var r resultRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return tool.Result{}, fmt.Errorf("a journaled tool result: %w", err)
	}
	res := tool.Result{Kind: r.Kind, Content: r.Content, Code: r.Code}
	if len(r.Parts) > 0 {
		parts := make([]tool.Part, len(r.Parts))
		for i, p := range r.Parts {
			parts[i] = tool.Part{Kind: p.Kind, Text: p.Text, Data: p.Data, MediaType: p.MediaType, URI: p.URI, Name: p.Name}
			if p.Blob && parts[i].Data == nil {
				parts[i].Data = []byte{}
			}
		}
		res.Parts = &tool.Parts{Items: parts}
		if r.PartsText {
			res.Content = res.Parts.Text()
		}
	}
	if r.HasArt {
		res.Artifact = &tool.Artifact{TypeName: r.TypeName, JSON: r.JSON, Data: r.Data, MediaType: r.MediaType}
		if r.JSONBytes != nil {
			res.Artifact.JSON = r.JSONBytes
		}
		if r.ArtPart > 0 {
			if r.ArtPart > len(res.Parts.List()) {
				return tool.Result{}, fmt.Errorf("a journaled tool result: its artifact is part %d of %d", r.ArtPart, len(res.Parts.List()))
			}
			res.Artifact.Data = res.Parts.List()[r.ArtPart-1].Data
		}
	}
	return res, nil
}

// OutcomeOf classifies a finished call's result for the journal, by what the call's
// dispatch reports and the result's code, never by its text: a timeout is timed_out; a
// call whose caller went away, cancelled; a call that left with no answer back (the
// dispatching tool says so: toolinternal.Dispatch.Unknown), outcome_unknown.
func OutcomeOf(ctx context.Context, res tool.Result) string {
	switch {
	case !res.IsError():
		return toolinternal.OutcomeSucceeded
	case res.Code == tool.CodeTimeout:
		return toolinternal.OutcomeTimedOut
	case ctx.Err() != nil:
		return toolinternal.OutcomeCancelled
	}
	if d := toolinternal.DispatchFrom(ctx); d != nil && d.Unknown {
		return toolinternal.OutcomeUnknown
	}
	return toolinternal.OutcomeFailed
}

// Dispatcher is how a call that leaves the process (to a worker, to an MCP server) is
// sent and its outcome kept, for Journaled.
type Dispatcher struct {
	// Worker names where the call goes, for its dispatch record; "" when Send records
	// each attempt itself (Journal.Dispatched), as the router does for each replica it
	// tries.
	Worker string
	// Send sends the call. data is what its outcome is replayed from; nil keeps
	// EncodeResult(res).
	Send func(ctx context.Context) (res tool.Result, data []byte)
	// Replay is the result of an outcome's data; nil is DecodeResult.
	Replay func(data []byte) (tool.Result, error)
	// Encode is the data of a result the journal gives itself (an unknown outcome), in
	// the form Replay reads; nil is EncodeResult.
	Encode func(res tool.Result) []byte
}

// waitedForPerson reports whether the call in ctx, dispatched before, was waiting for a
// person's answer to its question when its run stopped: the tool had not finished, so
// the call is sent again and the journal answers the questions it asked before.
func waitedForPerson(ctx context.Context) bool {
	a := toolinternal.AskerFrom(ctx)
	return a != nil && a.Waiting(ctx)
}

// Journaled runs a call that leaves the process under the run's journal in ctx, when
// there is one: the one place where a call is journaled. A call with a recorded outcome
// is not sent again but answered from the journal; a call dispatched before without an
// outcome is sent again only when idempotent (with the same idempotency key) or when it
// was waiting for a person's answer, otherwise it gets UnknownOutcome; any other call is
// recorded as dispatched before it leaves, and its outcome after. sent is false when the result is the journal's own (the call's
// outcome is unknown, or the journal failed) rather than what Send or Replay gave.
func Journaled(ctx context.Context, name string, idempotent bool, d Dispatcher) (res tool.Result, sent bool) {
	j := toolinternal.JournalFrom(ctx)
	if j == nil {
		res, _ := d.Send(ctx)
		return res, true
	}
	data, done, dispatched := j.Recorded(ctx)
	if !done && ctx.Value(toolinternal.ReplayOnlyKey{}) != nil {
		// A layer let the call through unchecked because the journal held its outcome,
		// which another call took meanwhile: it is not sent (fail closed).
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' was not sent: the outcome the run's journal held for it, to replay, was taken by another call", name)), false
	}
	switch {
	case done:
		failpoint.Hit(failpoint.ReplayOutcome)
		replay := d.Replay
		if replay == nil {
			replay = DecodeResult
		}
		res, err := replay(data)
		if err != nil {
			j.Damaged(ctx, fmt.Errorf("the outcome of tool '%s': %w", name, err))
			return JournalFailed(name, err), false
		}
		return res, true
	case dispatched && !idempotent && !waitedForPerson(ctx):
		res := UnknownOutcome(name)
		encode := d.Encode
		if encode == nil {
			encode = EncodeResult
		}
		if err := j.Finished(ctx, toolinternal.OutcomeUnknown, encode(res), false); err != nil {
			return JournalFailed(name, err), false
		}
		return res, false
	}
	if d.Worker != "" {
		if err := j.Dispatched(ctx, d.Worker, 1); err != nil {
			return JournalFailed(name, err), false
		}
	}
	if toolinternal.DispatchFrom(ctx) == nil {
		ctx, _ = toolinternal.WithDispatch(ctx) // for the outcome's classification
	}
	began := time.Now()
	res, rec := d.Send(ctx)
	toolinternal.DispatchFrom(ctx).Took = time.Since(began) // for the journal's record
	failpoint.Hit(failpoint.OutcomeReceived)                // crash tests: the outcome is here and not yet recorded
	if rec == nil {
		rec = EncodeResult(res)
	}
	if err := j.Finished(ctx, OutcomeOf(ctx, res), rec, idempotent); err != nil {
		return JournalFailed(name, err), false
	}
	return res, true
}
