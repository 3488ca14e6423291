package loop

import (
	"time"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Event is something that happened in a loop. The concrete types below are all of them.
type Event interface{ loopEvent() }

// ModelCalled reports one model call.
type ModelCalled struct {
	Iteration    int
	Model        string
	Usage        llm.Usage
	CostUSD      float64
	FinishReason string
}

// AssistantText reports text the model wrote in a turn that also called tools.
type AssistantText struct {
	Iteration int
	LoopID    string
	Text      string
}

// ToolCallStarted reports a tool call the model asked for, before anything is done with it.
type ToolCallStarted struct {
	Iteration int
	LoopID    string
	Call      llm.ToolCall
}

// Outcome classifies how a tool call ended.
type Outcome int

// Outcomes of a tool call.
const (
	OutcomeOK Outcome = iota + 1
	OutcomeError
	OutcomeUnknownTool
	OutcomeInvalidArguments
)

// ToolCallFinished reports the end of a tool call and what the model will read.
type ToolCallFinished struct {
	Iteration int
	LoopID    string
	Call      llm.ToolCall
	Outcome   Outcome
	Content   string
	Result    tool.Result
	// WorkerID and Attempts say where a remote tool ran; empty for local tools and for
	// calls settled before dispatch.
	WorkerID string
	Attempts int
	Duration time.Duration
}

// ToolsChanged reports a change of the tool set by the loop's strategies after a tool
// call: the names that left and joined, and the whole set the next model call offers.
type ToolsChanged struct {
	Iteration int
	LoopID    string
	Added     []string
	Removed   []string
	Tools     []string
}

// TextDelta is text the model is writing, as it arrives (Options.StreamText).
type TextDelta struct {
	Iteration int
	LoopID    string
	Text      string
}

func (TextDelta) loopEvent()        {}
func (ModelCalled) loopEvent()      {}
func (AssistantText) loopEvent()    {}
func (ToolCallStarted) loopEvent()  {}
func (ToolCallFinished) loopEvent() {}
func (ToolsChanged) loopEvent()     {}
