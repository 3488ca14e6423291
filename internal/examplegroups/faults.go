package examplegroups

import (
	"context"
	"fmt"
	"strings"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// Faults group texts.
const (
	FaultsRole        = "faults"
	FaultsDescription = "Tools that misbehave on purpose: to try how the mesh handles large results and crashing tools"
	// MaxGeneratedBytes bounds generate_text, so that a model cannot make a worker
	// allocate without limit.
	MaxGeneratedBytes = 64 << 20
)

// GenerateText is the input of generate_text.
type GenerateText struct {
	Bytes int `json:"bytes" jsonschema:"how many bytes of text to return"`
}

// PanicNow is the input of panic_now.
type PanicNow struct {
	Message string `json:"message" jsonschema:"what the tool panics with"`
}

// faultsGroup returns the faults group: generate_text returns as many bytes as asked for
// (up to MaxGeneratedBytes), panic_now panics.
func faultsGroup(wrap Wrap) worker.Group {
	generate := tool.MustFunc("generate_text", "Return a text of the given number of bytes",
		func(_ context.Context, in GenerateText) (string, error) {
			if in.Bytes < 0 || in.Bytes > MaxGeneratedBytes {
				return "", fmt.Errorf("bytes must be between 0 and %d, got %d", MaxGeneratedBytes, in.Bytes)
			}
			return strings.Repeat("x", in.Bytes), nil
		}, tool.Idempotent())
	panicNow := tool.MustFunc("panic_now", "Panic with the given message",
		func(_ context.Context, in PanicNow) (string, error) {
			panic(in.Message)
		})
	return worker.Group{
		Role:        FaultsRole,
		Description: FaultsDescription,
		Provider:    "toolmesh",
		Version:     "1.0.0",
		Tools:       wrap.all([]tool.Tool{generate, panicNow}),
	}
}
