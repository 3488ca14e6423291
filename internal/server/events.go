package server

import (
	"errors"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// emitter streams a run's events: it numbers them, stamps them with the run id and the
// time, and sends them. It only streams; the run service keeps the run's record.
type emitter struct {
	stream toolpb.OrchestratorService_RunServer

	mu     sync.Mutex
	runID  string
	seq    int64
	broken bool
}

// send sends one event, numbered seq (0: the next number) and stamped at (zero: now).
// After the client went away it sends nothing more; the run's context is cancelled with
// the stream, unless the run is detached.
func (e *emitter) send(ev *toolpb.RunResponse, seq int64, at time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.broken {
		return nil
	}
	if seq == 0 {
		seq = e.seq + 1
	}
	if at.IsZero() {
		at = time.Now()
	}
	e.seq = seq
	ev.RunId = e.runID
	ev.Sequence = e.seq
	ev.Time = timestamppb.New(at)
	if err := e.stream.Send(ev); err != nil {
		e.broken = true
		return err
	}
	return nil
}

// sendEncoded sends an event the journal encoded (a RunResponse without its run id,
// sequence number and time): those fields are appended to its bytes, which is a valid
// encoding of the whole message, and the bytes go as they are (encodedEvent).
func (e *emitter) sendEncoded(wire []byte, seq int64, at time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.broken {
		return nil
	}
	e.seq = seq
	if err := sendEvent(e.stream, appendEnvelope(wire, e.runID, seq, at)); err != nil {
		e.broken = true
		return err
	}
	return nil
}

// appendEnvelope is wire, a RunResponse's encoding, with its run id, sequence number and
// time appended.
func appendEnvelope(wire []byte, runID string, seq int64, at time.Time) []byte {
	b := make([]byte, 0, len(wire)+len(runID)+32)
	b = append(b, wire...)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, runID)
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(seq))
	var ts []byte
	if s := at.Unix(); s != 0 {
		ts = protowire.AppendTag(ts, 1, protowire.VarintType)
		ts = protowire.AppendVarint(ts, uint64(s))
	}
	if n := at.Nanosecond(); n != 0 {
		ts = protowire.AppendTag(ts, 2, protowire.VarintType)
		ts = protowire.AppendVarint(ts, uint64(n))
	}
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	return protowire.AppendBytes(b, ts)
}

// encodedEvent is a RunResponse already encoded, which the server's codec sends as it is.
type encodedEvent struct{ b []byte }

// detach stops sending: the stream's handler returned.
func (e *emitter) detach() {
	e.mu.Lock()
	e.broken = true
	e.mu.Unlock()
}

// observe streams an event of the run service.
func (e *emitter) observe(ev run.Event) {
	var seq int64
	var at time.Time
	if sq, ok := ev.(run.Sequenced); ok {
		seq, at, ev = sq.Seq, sq.Time, sq.Event
		if sq.Wire != nil {
			if s, ok := ev.(run.Started); ok {
				e.mu.Lock()
				e.runID = clientRunID(s.RunID)
				e.mu.Unlock()
			}
			_ = e.sendEncoded(sq.Wire, seq, at)
			return
		}
	}
	if s, ok := ev.(run.Started); ok {
		e.mu.Lock()
		e.runID = clientRunID(s.RunID)
		e.mu.Unlock()
	}
	if p := eventProto(ev); p != nil {
		_ = e.send(p, seq, at)
	}
}

// eventProto is the wire form of an event; nil for events the wire does not carry.
func eventProto(ev run.Event) *toolpb.RunResponse {
	switch x := ev.(type) {
	case run.Ended:
		var re *run.Error
		if errors.As(x.Err, &re) {
			return &toolpb.RunResponse{Event: &toolpb.RunResponse_Error{Error: runErrorProto(re.Err)}}
		}
		if x.Err != nil {
			return &toolpb.RunResponse{Event: &toolpb.RunResponse_Error{Error: runErrorProto(x.Err)}}
		}
		res := x.Result
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_FinalResult{FinalResult: &toolpb.FinalResult{
			Text: res.Text, Iterations: int32(res.Iterations), ReturnDirect: res.ReturnDirect,
			Usage: &toolpb.Usage{Model: res.Model, InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens, CostUsd: res.CostUSD},
		}}}
	case run.ApprovalRequested:
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_ApprovalRequested{ApprovalRequested: approvalRequestedProto(x)}}
	case run.ApprovalDecided:
		d := &toolpb.ApprovalDecided{CallId: x.CallID, Tool: x.Tool, LoopId: x.LoopID, Approved: x.Approved, Reason: x.Reason, DecidedBy: x.By, InputId: x.InputID}
		if x.Answer != nil && x.Approved { // an accepted answer
			d.ContentJson = string(x.Answer.Content)
		}
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_ApprovalDecided{ApprovalDecided: d}}
	case run.Started:
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_Started{Started: &toolpb.RunStarted{
			Model: x.Model, Tools: x.Tools, LoopId: x.LoopID, MaxIterations: int32(x.MaxIterations),
		}}}
	case loop.ModelCalled:
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_Usage{Usage: &toolpb.Usage{
			Model: x.Model, InputTokens: x.Usage.InputTokens, OutputTokens: x.Usage.OutputTokens, CostUsd: x.CostUSD,
		}}}
	case loop.ToolsChanged:
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_ToolsChanged{ToolsChanged: &toolpb.ToolsChanged{
			Added: x.Added, Removed: x.Removed, Tools: x.Tools, Iteration: int32(x.Iteration), LoopId: x.LoopID,
		}}}
	case loop.AssistantText:
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_Message{Message: &toolpb.AssistantMessage{Text: x.Text, Iteration: int32(x.Iteration), LoopId: x.LoopID}}}
	case loop.ToolCallStarted:
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_ToolCallStarted{ToolCallStarted: &toolpb.ToolCallStarted{
			CallId: x.Call.ID, Tool: x.Call.Name, ArgumentsJson: x.Call.Arguments, Iteration: int32(x.Iteration), LoopId: x.LoopID,
		}}}
	case loop.ToolCallFinished:
		fin := &toolpb.ToolCallFinished{
			CallId: x.Call.ID, Tool: x.Call.Name, Outcome: outcomeProto(x.Outcome), Content: x.Content,
			WorkerId: x.WorkerID, Duration: durationpb.New(x.Duration), Attempts: int32(x.Attempts), LoopId: x.LoopID,
		}
		if x.Result.Artifact != nil {
			if a, err := wire.ArtifactToProto(x.Result.Artifact); err == nil {
				fin.Artifact = a
			}
		}
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_ToolCallFinished{ToolCallFinished: fin}}
	case run.Warning:
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_Warning{Warning: &toolpb.Warning{Field: x.Field, Message: x.Message}}}
	case loop.TextDelta:
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_TextDelta{TextDelta: &toolpb.TextDelta{LoopId: x.LoopID, Iteration: int32(x.Iteration), Text: x.Text}}}
	case run.EntryAdded:
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_BlackboardChanged{BlackboardChanged: &toolpb.BlackboardChanged{
			LoopId: x.LoopID, CallId: x.CallID, Tool: x.Tool, Index: int32(x.Index),
			Object: eventObject(tool.Binding{Name: x.Name, Entry: x.Entry}),
		}}}
	case run.ProgressReported:
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_Progress{Progress: &toolpb.Progress{LoopId: x.LoopID, CallId: x.CallID, Tool: x.Tool, Status: x.Status}}}
	case run.MessageSent:
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_MessageToUser{MessageToUser: &toolpb.MessageToUser{LoopId: x.LoopID, CallId: x.CallID, Text: x.Text}}}
	case run.AssetAdded:
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_AssetAdded{AssetAdded: &toolpb.AssetAdded{LoopId: x.LoopID, Asset: &toolpb.Asset{
			Object: eventObject(tool.Binding{Entry: x.Asset.Entry}), Tool: x.Asset.Tool, CallId: x.Asset.CallID,
		}}}}
	case run.ArtifactCaptured:
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_Artifact{Artifact: &toolpb.ArtifactCaptured{
			LoopId: x.LoopID, CallId: x.CallID, Tool: x.Tool, Sink: x.Sink, Object: eventObject(tool.Binding{Entry: x.Entry}),
		}}}
	case run.Replanned:
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_ReplanRequested{ReplanRequested: &toolpb.ReplanRequested{
			LoopId: x.LoopID, CallId: x.CallID, Tool: x.Tool, Reason: x.Reason, Added: eventObjects(x.Added), Iterations: int32(x.Iterations),
		}}}
	case run.Terminated:
		scope := toolpb.TerminateScope_TERMINATE_SCOPE_AGENT
		if x.Scope == tool.TerminateAction {
			scope = toolpb.TerminateScope_TERMINATE_SCOPE_ACTION
		}
		return &toolpb.RunResponse{Event: &toolpb.RunResponse_Terminated{Terminated: &toolpb.Terminated{
			LoopId: x.LoopID, CallId: x.CallID, Tool: x.Tool, Scope: scope, Reason: x.Reason,
		}}}
	case run.Nested:
		p := eventProto(x.Event)
		if p != nil {
			p.Scope = scopeProto(x.Scope)
		}
		return p
	case run.NestedStarted:
		return &toolpb.RunResponse{Scope: scopeProto(x.Scope), Event: &toolpb.RunResponse_NestedLoopStarted{NestedLoopStarted: &toolpb.NestedLoopStarted{
			Model: x.Model, Tools: x.Tools, MaxIterations: int32(x.MaxIterations),
		}}}
	case run.NestedFinished:
		return &toolpb.RunResponse{Scope: scopeProto(x.Scope), Event: &toolpb.RunResponse_NestedLoopFinished{NestedLoopFinished: &toolpb.NestedLoopFinished{
			Iterations: int32(x.Iterations), ToolCalls: int32(x.ToolCalls), Error: x.Err,
		}}}
	}
	return nil
}

// eventObject is a blackboard object as an event carries it: a blob over
// wire.MaxEventBlobBytes goes without its data (its media type and size say what it is;
// GetRun has it), so that one event, and its journal record, stays small.
func eventObject(b tool.Binding) *toolpb.BlackboardObject {
	return wire.BindingToProtoWithin(b, wire.MaxEventBlobBytes)
}

func eventObjects(bs []tool.Binding) []*toolpb.BlackboardObject {
	if len(bs) == 0 {
		return nil
	}
	out := make([]*toolpb.BlackboardObject, len(bs))
	for i, b := range bs {
		out[i] = eventObject(b)
	}
	return out
}

func scopeProto(s run.Scope) *toolpb.LoopScope {
	return &toolpb.LoopScope{LoopId: s.LoopID, ParentLoopId: s.ParentLoopID, Tool: s.Tool, Kind: kindProto(s.Kind), Depth: int32(s.Depth), ChildRunId: s.ChildRunID,
		ParentCallId: s.ParentCallID}
}

func outcomeProto(o loop.Outcome) toolpb.ToolCallOutcome {
	switch o {
	case loop.OutcomeOK:
		return toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK
	case loop.OutcomeUnknownTool:
		return toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_UNKNOWN_TOOL
	case loop.OutcomeInvalidArguments:
		return toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_INVALID_ARGUMENTS
	default:
		return toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_ERROR
	}
}

// approvalRequestedProto is a call's wait for a person on the wire: an approval, or a
// question its tool asked.
func approvalRequestedProto(x run.ApprovalRequested) *toolpb.ApprovalRequested {
	ap := &toolpb.ApprovalRequested{CallId: x.CallID, Tool: x.Tool, ArgumentsJson: x.Arguments, LoopId: x.LoopID,
		Iteration: int32(x.Iteration), Deadline: timestamppb.New(x.Deadline)}
	if q := x.Question; q != nil {
		ap.Input = &toolpb.InputRequest{InputId: x.InputID, Message: q.Message, RequestedSchemaJson: string(q.Schema),
			Server: q.Server, ProtocolVersion: q.Protocol}
	}
	return ap
}
