package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// codec gives the run journal the wire forms it keeps: events as RunResponse in
// protobuf, requests as RunRequest in protobuf JSON.
type codec struct{}

func (codec) AppendEvent(dst []byte, ev run.Event) ([]byte, bool) {
	p := eventProto(ev)
	if p == nil {
		return nil, false
	}
	b, err := proto.MarshalOptions{}.MarshalAppend(dst, p)
	if err != nil {
		// Text that is not UTF-8 (a layer of the program's own returned it) is the one
		// thing that fails: the client gets the event with its bad bytes replaced.
		wire.FixUTF8(p.ProtoReflect())
		if b, err = (proto.MarshalOptions{}).MarshalAppend(dst, p); err != nil {
			return nil, false
		}
	}
	return b, true
}

func (codec) Request(wire json.RawMessage) (run.Request, error) {
	req := &toolpb.RunRequest{}
	if err := protojson.Unmarshal(wire, req); err != nil {
		return run.Request{}, fmt.Errorf("the journaled request: %w", err)
	}
	if fe := validateRun(req); fe != nil {
		return run.Request{}, fe
	}
	return runRequest(req), nil
}

// WatchRun streams a run's events from the journal, then live.
func (o *orchestratorServer) WatchRun(req *toolpb.WatchRunRequest, stream toolpb.OrchestratorService_WatchRunServer) error {
	if fe := checkRunID("run_id", req.GetRunId(), true); fe != nil {
		return fe.status()
	}
	if req.GetAfterSequence() < 0 {
		return invalid("after_sequence", "must not be negative, got %d", req.GetAfterSequence()).status()
	}
	key, err := o.s.resolveRun(stream.Context(), req.GetRunId())
	if err != nil {
		return err
	}
	// The watch ends with the orchestrator's shutdown too, once it has sent what the
	// journal holds: a run the shutdown stopped stays in the journal, unfinished, for
	// another orchestrator to take over and its watchers to follow there; a finished
	// one's watch ends with the run's end, as ever.
	last := req.GetAfterSequence()
	err = o.s.runs.Watch(stream.Context(), key, req.GetAfterSequence(), o.s.watchers.Done(), func(rec run.Record) error {
		last = rec.Seq
		if !rec.JSON {
			// As it was encoded for the journal, with its envelope.
			return sendEvent(stream, appendEnvelope(rec.Data, req.GetRunId(), rec.Seq, rec.Time))
		}
		ev := &toolpb.RunResponse{}
		if err := protojson.Unmarshal(rec.Data, ev); err != nil {
			return fmt.Errorf("record %d of the run's journal: %w", rec.Seq, err)
		}
		ev.RunId, ev.Sequence, ev.Time = req.GetRunId(), rec.Seq, timestamppb.New(rec.Time)
		return stream.Send(ev)
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, run.ErrNotFound):
		return notFound(err).status()
	case stream.Context().Err() != nil:
		return stream.Context().Err()
	case errors.Is(err, run.ErrWatchStopped), o.s.watchers.Err() != nil && errors.Is(err, run.ErrUnavailable):
		// Before ErrUnavailable: a journal read the shutdown cut short fails so too.
		return statusError(toolpb.ErrorReason_ERROR_REASON_SHUTTING_DOWN,
			fmt.Sprintf("the orchestrator is shutting down; watch the run again after sequence %d on another orchestrator", last),
			map[string]string{"run_id": req.GetRunId(), "resume": "WatchRun", "after_sequence": strconv.FormatInt(last, 10)})
	case errors.Is(err, run.ErrUnavailable):
		return statusError(toolpb.ErrorReason_ERROR_REASON_JOURNAL_UNAVAILABLE, err.Error(), nil)
	}
	return statusError(toolpb.ErrorReason_ERROR_REASON_INTERNAL, err.Error(), nil)
}

// ListRuns lists the journal's runs a page at a time; the page token is the last id.
// The filters on tenant, agent and start time leave runs out of a page, never end the
// paging early.
func (o *orchestratorServer) ListRuns(ctx context.Context, req *toolpb.ListRunsRequest) (*toolpb.ListRunsResponse, error) {
	if fe := validateListRuns(req); fe != nil {
		return nil, fe.status()
	}
	// A caller of a tenant sees its own; one of no tenant may ask for a tenant's.
	tenant := tenantOf(ctx)
	switch {
	case tenant != "" && req.GetTenant() != "" && req.GetTenant() != tenant:
		return nil, (&fieldError{reason: toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED, field: "tenant",
			desc: "a caller of a tenant lists its own tenant's runs only"}).status()
	case tenant == "":
		tenant = req.GetTenant()
	}
	runs, next, err := o.s.runPage(ctx, req, tenant)
	if err != nil {
		return nil, statusError(toolpb.ErrorReason_ERROR_REASON_JOURNAL_UNAVAILABLE, err.Error(), nil)
	}
	resp := &toolpb.ListRunsResponse{NextPageToken: next}
	filtered := req.GetAgent() != "" || req.GetStartedAfter() != nil || req.GetStartedBefore() != nil
	for _, r := range runs {
		if tenantOf(ctx) == "" && o.s.ownRun(ctx, r.ID) != nil {
			continue // another tenant's
		}
		if filtered && !listed(req, r) {
			continue
		}
		resp.Runs = append(resp.Runs, &toolpb.RunSummary{RunId: clientRunID(r.ID), State: stateProto(r.State), Owner: r.Owner,
			Started: timestamppb.New(r.Started), Updated: timestamppb.New(r.Updated), Records: r.Records,
			Tenant: o.s.keyTenant(r.ID), Agent: r.Agent})
	}
	return resp, nil
}

// validateListRuns checks a ListRuns request's fields.
func validateListRuns(req *toolpb.ListRunsRequest) *fieldError {
	if n := req.GetPageSize(); n < 0 || n > 1000 {
		return invalid("page_size", "must be 0 to 1000, got %d", n)
	}
	if len(req.GetPageToken()) > 256 {
		return invalid("page_token", "is not a token ListRuns gave")
	}
	if _, ok := toolpb.RunState_name[int32(req.GetState())]; !ok {
		return invalid("state", "unknown state %d", req.GetState())
	}
	for field, v := range map[string]string{"tenant": req.GetTenant(), "agent": req.GetAgent()} {
		if p := wire.CheckText(v, 128); p != "" {
			return invalid(field, "%s", p)
		}
	}
	for field, ts := range map[string]*timestamppb.Timestamp{"started_after": req.GetStartedAfter(), "started_before": req.GetStartedBefore()} {
		if ts != nil && ts.CheckValid() != nil {
			return invalid(field, "is not a valid time: %v", ts.CheckValid())
		}
	}
	return nil
}

// runPage is a page of the journal's runs (of tenant's, when it is set) and the token of
// the next page ("" after the last). A tenant's runs are the keys under its name
// (runKey): a page of them starts after the last one the client saw, and ends where
// they do. A page token is a run id.
func (s *Server) runPage(ctx context.Context, req *toolpb.ListRunsRequest, tenant string) ([]run.Summary, string, error) {
	size := int(req.GetPageSize())
	if size == 0 {
		size = 100
	}
	// One more than the page tells whether another page follows; at the store's largest
	// page, a full page is taken to have one.
	ask := min(size+1, runlog.MaxList)
	after := req.GetPageToken()
	if tenant != "" {
		after = runKey(tenant, after)
		if req.GetPageToken() == "" {
			after = tenant + "/"
		}
	}
	runs, err := s.runs.List(ctx, stateFromProto(req.GetState()), after, ask, true)
	if err != nil {
		return nil, "", err
	}
	if tenant != "" {
		mine := 0
		for mine < len(runs) && strings.HasPrefix(runs[mine].ID, tenant+"/") {
			mine++
		}
		if mine < len(runs) {
			runs, ask = runs[:mine], size+1 // past the tenant's runs: no page follows
		}
	}
	if len(runs) > size || (ask == size && len(runs) == size) {
		return runs[:size], clientRunID(runs[size-1].ID), nil
	}
	return runs, "", nil
}

// listed reports whether r passes the agent and start-time filters of req.
func listed(req *toolpb.ListRunsRequest, r run.Summary) bool {
	switch {
	case req.GetAgent() != "" && r.Agent != req.GetAgent():
		return false
	case req.GetStartedAfter() != nil && r.Started.Before(req.GetStartedAfter().AsTime()):
		return false
	case req.GetStartedBefore() != nil && !r.Started.Before(req.GetStartedBefore().AsTime()):
		return false
	}
	return true
}

// ApproveToolCall decides on a call that waits for approval.
func (o *orchestratorServer) ApproveToolCall(ctx context.Context, req *toolpb.ApproveToolCallRequest) (*toolpb.ApproveToolCallResponse, error) {
	if fe := checkRunID("run_id", req.GetRunId(), true); fe != nil {
		return nil, fe.status()
	}
	if p := checkStoredText(req.GetCallId(), 256); p != "" || req.GetCallId() == "" {
		return nil, invalid("call_id", "must be the call's id, 1 to 256 bytes of valid UTF-8 without NUL bytes").status()
	}
	if p := checkStoredText(req.GetLoopId(), 64); p != "" {
		return nil, invalid("loop_id", "%s", p).status()
	}
	if p := checkStoredText(req.GetReason(), 1024); p != "" {
		return nil, invalid("reason", "%s", p).status()
	}
	if p := checkStoredText(req.GetInputId(), 16); p != "" {
		return nil, invalid("input_id", "%s", p).status()
	}
	if c := req.GetContentJson(); len(c) > run.MaxAnswerBytes || (c != "" && !json.Valid([]byte(c))) {
		return nil, invalid("content_json", "must be a JSON object of at most %d bytes", run.MaxAnswerBytes).status()
	}
	var approve bool
	switch req.GetDecision() {
	case toolpb.ApprovalDecision_APPROVAL_DECISION_APPROVE:
		approve = true
	case toolpb.ApprovalDecision_APPROVAL_DECISION_DENY:
	default:
		return nil, invalid("decision", "must be APPROVE or DENY, got %s", req.GetDecision()).status()
	}
	key, err := o.s.resolveRun(ctx, req.GetRunId())
	if err != nil {
		return nil, err
	}
	err = o.s.runs.Approve(ctx, key, run.Approval{LoopID: req.GetLoopId(), CallID: req.GetCallId(), InputID: req.GetInputId(),
		Approve: approve, Reason: req.GetReason(), By: whoOf(ctx), Content: req.GetContentJson()})
	var fe *run.FieldError
	switch {
	case err == nil:
		return &toolpb.ApproveToolCallResponse{}, nil
	case errors.As(err, &fe):
		return nil, (&fieldError{reason: classify(fe.Kind), field: fe.Field, desc: fe.Problem}).status()
	case errors.Is(err, run.ErrNotFound):
		return nil, notFound(err).status()
	case errors.Is(err, run.ErrNoApproval):
		return nil, statusError(toolpb.ErrorReason_ERROR_REASON_APPROVAL_NOT_PENDING, err.Error(), map[string]string{"field": "call_id"})
	case errors.Is(err, run.ErrUnavailable):
		return nil, statusError(toolpb.ErrorReason_ERROR_REASON_JOURNAL_UNAVAILABLE, err.Error(), nil)
	}
	return nil, statusError(toolpb.ErrorReason_ERROR_REASON_INTERNAL, err.Error(), nil)
}

func stateFromProto(s toolpb.RunState) runlog.State {
	switch s {
	case toolpb.RunState_RUN_STATE_RUNNING:
		return runlog.StateRunning
	case toolpb.RunState_RUN_STATE_SUCCEEDED:
		return runlog.StateSucceeded
	case toolpb.RunState_RUN_STATE_FAILED:
		return runlog.StateFailed
	case toolpb.RunState_RUN_STATE_CANCELLED:
		return runlog.StateCancelled
	case toolpb.RunState_RUN_STATE_REPLAN_REQUESTED:
		return runlog.StateReplanRequested
	case toolpb.RunState_RUN_STATE_TERMINATED:
		return runlog.StateTerminated
	case toolpb.RunState_RUN_STATE_HELD:
		return runlog.StateHeld
	}
	return ""
}
