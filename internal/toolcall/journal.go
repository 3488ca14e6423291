package toolcall

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

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
// or its outcome is not recorded, and the run stops.
func JournalFailed(name string, err error) tool.Result {
	return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' was not run: the run's journal failed: %v", name, err))
}

// resultRecord is a tool result as the journal keeps it: what the model reads, its
// code, and its artifact (its value form stays in process).
type resultRecord struct {
	Kind      tool.ResultKind `json:"kind"`
	Content   string          `json:"content,omitempty"`
	Code      tool.ErrorCode  `json:"code,omitempty"`
	TypeName  string          `json:"artifact_type,omitempty"`
	JSON      json.RawMessage `json:"artifact_json,omitempty"`
	Data      []byte          `json:"artifact_data,omitempty"`
	MediaType string          `json:"artifact_media_type,omitempty"`
	HasArt    bool            `json:"artifact,omitempty"`
}

// EncodeResult is res as the journal records it.
func EncodeResult(res tool.Result) []byte {
	r := resultRecord{Kind: res.Kind, Content: res.Content, Code: res.Code}
	if a := res.Artifact; a != nil {
		r.HasArt, r.TypeName, r.Data, r.MediaType = true, a.TypeName, a.Data, a.MediaType
		if len(a.JSON) > 0 && json.Valid(a.JSON) {
			r.JSON = a.JSON
		} else if a.Value != nil && len(a.Data) == 0 {
			if b, err := json.Marshal(a.Value); err == nil {
				r.JSON = b
			}
		}
	}
	b, _ := toolinternal.MarshalJSON(r)
	return b
}

// DecodeResult is the result EncodeResult recorded.
func DecodeResult(b []byte) (tool.Result, error) {
	var r resultRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return tool.Result{}, fmt.Errorf("a journaled tool result: %w", err)
	}
	res := tool.Result{Kind: r.Kind, Content: r.Content, Code: r.Code}
	if r.HasArt {
		res.Artifact = &tool.Artifact{TypeName: r.TypeName, JSON: r.JSON, Data: r.Data, MediaType: r.MediaType}
	}
	return res, nil
}

// OutcomeOf classifies a finished call's result for the journal.
func OutcomeOf(ctx context.Context, res tool.Result) string {
	switch {
	case !res.IsError():
		return toolinternal.OutcomeSucceeded
	case res.Code == tool.CodeTimeout:
		return toolinternal.OutcomeTimedOut
	case ctx.Err() != nil:
		return toolinternal.OutcomeCancelled
	case strings.Contains(res.Content, "outcome of tool") && strings.Contains(res.Content, "unknown"),
		strings.Contains(res.Content, "its outcome is unknown"):
		return toolinternal.OutcomeUnknown
	}
	return toolinternal.OutcomeFailed
}

// Journaled runs a call that leaves the process (to an MCP server, say) under the run's
// journal in ctx, when there is one: a call with a recorded outcome is not sent again
// but answered from the journal; a call dispatched before without an outcome is sent
// again only when idempotent, otherwise it gets UnknownOutcome; any other call is
// recorded as dispatched to worker before send runs, and its outcome after.
func Journaled(ctx context.Context, name, worker string, idempotent bool, send func(context.Context) tool.Result) tool.Result {
	j := toolinternal.JournalFrom(ctx)
	if j == nil {
		return send(ctx)
	}
	data, done, dispatched := j.Recorded(ctx)
	switch {
	case done:
		failpoint.Hit(failpoint.ReplayOutcome)
		res, err := DecodeResult(data)
		if err != nil {
			j.Damaged(ctx, fmt.Errorf("the outcome of tool '%s': %w", name, err))
			return JournalFailed(name, err)
		}
		return res
	case dispatched && !idempotent:
		res := UnknownOutcome(name)
		if err := j.Finished(ctx, toolinternal.OutcomeUnknown, EncodeResult(res), false); err != nil {
			return JournalFailed(name, err)
		}
		return res
	}
	if err := j.Dispatched(ctx, worker, 1); err != nil {
		return JournalFailed(name, err)
	}
	res := send(ctx)
	if err := j.Finished(ctx, OutcomeOf(ctx, res), EncodeResult(res), idempotent); err != nil {
		return JournalFailed(name, err)
	}
	return res
}
