// Package client is the Go SDK for toolmesh's OrchestratorService: run a prompt and
// receive its events as they happen, list tools, groups and workers, inspect and cancel
// runs. Errors from the orchestrator come back as *Error values that match this package's
// sentinels with errors.Is.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// Client talks to one orchestrator.
type Client struct {
	conn *grpc.ClientConn
	orch toolpb.OrchestratorServiceClient
}

// Dial connects to an orchestrator at addr with the given transport credentials:
// credentials.NewTLS(...) for TLS, or insecure.NewCredentials() for a plaintext
// connection (loopback, or inside a mesh that encrypts for you). The connection is made
// lazily, on the first call. opts are further dial options (a stats handler, say).
func Dial(addr string, creds credentials.TransportCredentials, opts ...grpc.DialOption) (*Client, error) {
	if creds == nil {
		return nil, errors.New("client: no transport credentials: pass credentials.NewTLS(...) or insecure.NewCredentials()")
	}
	// Fixed flow-control windows: a run's events arrive at full speed without the PING
	// frames grpc-go's window estimation sends (opts may set others).
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithInitialWindowSize(1 << 20), grpc.WithInitialConnWindowSize(16 << 20)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{conn: conn, orch: toolpb.NewOrchestratorServiceClient(conn)}, nil
}

// New wraps an existing connection; Close does not close it.
func New(conn grpc.ClientConnInterface) *Client {
	return &Client{orch: toolpb.NewOrchestratorServiceClient(conn)}
}

// Close closes the connection Dial opened.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Run starts a run and returns its events as they arrive. The sequence ends after the
// final result, or with an error (an *Error for errors the orchestrator reported).
// Leaving the loop early (break, return) cancels the run's call: the orchestrator sees
// the client go away and cancels the run.
func (c *Client) Run(ctx context.Context, req *toolpb.RunRequest) iter.Seq2[*toolpb.RunResponse, error] {
	return func(yield func(*toolpb.RunResponse, error) bool) {
		callCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.orch.Run(callCtx, req)
		if err != nil {
			yield(nil, convertCtx(ctx, err))
			return
		}
		for {
			ev, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(nil, convertCtx(ctx, err))
				return
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// Watch streams the events of run runID after sequence number after (0: all of them),
// from any orchestrator replica sharing the run journal, until the run ends. A client
// whose Run or Watch stream broke watches again after the last sequence it saw and loses
// nothing.
func (c *Client) Watch(ctx context.Context, runID string, after int64) iter.Seq2[*toolpb.RunResponse, error] {
	return func(yield func(*toolpb.RunResponse, error) bool) {
		callCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.orch.WatchRun(callCtx, &toolpb.WatchRunRequest{RunId: runID, AfterSequence: after})
		if err != nil {
			yield(nil, convertCtx(ctx, err))
			return
		}
		for {
			ev, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(nil, convertCtx(ctx, err))
				return
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// ListRuns lists a page of the journal's runs (state unspecified: all of them); pass the
// returned token for the next page, "" after the last.
func (c *Client) ListRuns(ctx context.Context, state toolpb.RunState, pageSize int, pageToken string) ([]*toolpb.RunSummary, string, error) {
	resp, err := c.orch.ListRuns(ctx, &toolpb.ListRunsRequest{State: state, PageSize: int32(pageSize), PageToken: pageToken})
	if err != nil {
		return nil, "", convertCtx(ctx, err)
	}
	return resp.GetRuns(), resp.GetNextPageToken(), nil
}

// ApproveToolCall approves (approve true) or denies a call that waits for approval (an
// approval_requested event), with a reason; a denial's reason reaches the model. loopID
// is needed only when calls of that id wait in several loops of the run.
func (c *Client) ApproveToolCall(ctx context.Context, runID, callID, loopID string, approve bool, reason string) error {
	d := toolpb.ApprovalDecision_APPROVAL_DECISION_DENY
	if approve {
		d = toolpb.ApprovalDecision_APPROVAL_DECISION_APPROVE
	}
	_, err := c.orch.ApproveToolCall(ctx, &toolpb.ApproveToolCallRequest{RunId: runID, CallId: callID, LoopId: loopID, Decision: d, Reason: reason})
	return convertCtx(ctx, err)
}

// AnswerToolInput answers a question a tool asked while it ran (an approval_requested
// event with input): the answer's content, a JSON object valid against the question's
// requested schema. inputID is needed only when the call waits on several questions.
func (c *Client) AnswerToolInput(ctx context.Context, runID, callID, inputID, contentJSON string) error {
	_, err := c.orch.ApproveToolCall(ctx, &toolpb.ApproveToolCallRequest{RunId: runID, CallId: callID, InputId: inputID,
		Decision: toolpb.ApprovalDecision_APPROVAL_DECISION_APPROVE, ContentJson: contentJSON})
	return convertCtx(ctx, err)
}

// ReplanError is how RunAndWait reports a run that a tool ended by asking to plan again:
// the run succeeded in finding out that its plan does not hold.
type ReplanError struct{ Replan *toolpb.ReplanRequested }

func (e *ReplanError) Error() string {
	return "client: the run ended because tool '" + e.Replan.GetTool() + "' asked to replan: " + e.Replan.GetReason()
}

// TerminatedError is how RunAndWait reports a run that a tool ended by asking to
// terminate.
type TerminatedError struct{ Terminated *toolpb.Terminated }

func (e *TerminatedError) Error() string {
	return "client: the run ended because tool '" + e.Terminated.GetTool() + "' asked to terminate: " + e.Terminated.GetReason()
}

// RunAndWait runs a prompt to its end, handing every event to onEvent (which may be nil),
// and returns the final result. A run that a tool ended instead returns a *ReplanError
// or a *TerminatedError.
func (c *Client) RunAndWait(ctx context.Context, req *toolpb.RunRequest, onEvent func(*toolpb.RunResponse)) (*toolpb.FinalResult, error) {
	var final *toolpb.FinalResult
	for ev, err := range c.Run(ctx, req) {
		if err != nil {
			return nil, err
		}
		if onEvent != nil {
			onEvent(ev)
		}
		if f := ev.GetFinalResult(); f != nil {
			final = f
		}
		if r := ev.GetReplanRequested(); r != nil {
			return nil, &ReplanError{Replan: r}
		}
		if t := ev.GetTerminated(); t != nil {
			return nil, &TerminatedError{Terminated: t}
		}
	}
	if final == nil {
		return nil, errors.New("client: the run's stream ended without a final result")
	}
	return final, nil
}

// ListTools lists the tools of the given groups, or all tools.
func (c *Client) ListTools(ctx context.Context, groups ...string) ([]*toolpb.ToolInfo, error) {
	resp, err := c.orch.ListTools(ctx, &toolpb.ListToolsRequest{ToolGroups: groups})
	if err != nil {
		return nil, convertCtx(ctx, err)
	}
	return resp.GetTools(), nil
}

// ListToolGroups lists the tool groups.
func (c *Client) ListToolGroups(ctx context.Context) ([]*toolpb.ToolGroupStatus, error) {
	resp, err := c.orch.ListToolGroups(ctx, &toolpb.ListToolGroupsRequest{})
	if err != nil {
		return nil, convertCtx(ctx, err)
	}
	return resp.GetGroups(), nil
}

// ListWorkers lists the registered workers.
func (c *Client) ListWorkers(ctx context.Context) ([]*toolpb.WorkerStatus, error) {
	resp, err := c.orch.ListWorkers(ctx, &toolpb.ListWorkersRequest{})
	if err != nil {
		return nil, convertCtx(ctx, err)
	}
	return resp.GetWorkers(), nil
}

// GetRun reports a run.
func (c *Client) GetRun(ctx context.Context, runID string) (*toolpb.GetRunResponse, error) {
	resp, err := c.orch.GetRun(ctx, &toolpb.GetRunRequest{RunId: runID})
	if err != nil {
		return nil, convertCtx(ctx, err)
	}
	return resp, nil
}

// CancelRun cancels a run and returns its state afterwards.
func (c *Client) CancelRun(ctx context.Context, runID, reason string) (toolpb.RunState, error) {
	resp, err := c.orch.CancelRun(ctx, &toolpb.CancelRunRequest{RunId: runID, Reason: reason})
	if err != nil {
		return toolpb.RunState_RUN_STATE_UNSPECIFIED, convertCtx(ctx, err)
	}
	return resp.GetState(), nil
}

// Bearer is the dial option that sends token (a JWT the orchestrator verifies against
// its auth.jwt key set) as the authorization of every call. The token then travels only
// over TLS, unless allowPlaintext (loopback development).
func Bearer(token string, allowPlaintext bool) grpc.DialOption {
	return grpc.WithPerRPCCredentials(bearer{token: token, plaintext: allowPlaintext})
}

type bearer struct {
	token     string
	plaintext bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return !b.plaintext }
