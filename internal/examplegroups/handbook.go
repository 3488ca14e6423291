package examplegroups

import (
	"context"
	"fmt"
	"strings"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// The handbook group shows a one-shot tool across replicas: read_handbook runs at most
// once per tool loop, whichever replica serves it, because the worker registers it as
// once per loop and the orchestrator answers the repeated calls of a loop itself. Its
// replicas keep no count of their own.

// Handbook group texts.
const (
	HandbookRole        = "handbook"
	HandbookDescription = "The team handbook: how the team works"
	HandbookTool        = "read_handbook"
	HandbookToolDesc    = "Read the whole team handbook. It does not change during a task: read it once."
	HandbookAdvice      = "Follow the handbook above."
	HandbookSectionTool = "handbook_section"
	HandbookSectionDesc = "Read one section of the team handbook by its title"
)

// HandbookSections are the handbook's sections, in order.
var HandbookSections = [][2]string{
	{"Releases", "Release on Tuesdays and Thursdays, never on Fridays."},
	{"Reviews", "Every change gets one review; a change to the journal gets two."},
	{"On call", "The person on call answers a page within fifteen minutes."},
}

// HandbookText is what read_handbook answers: every section as "Title: text", one a line.
func HandbookText() string {
	lines := make([]string, len(HandbookSections))
	for i, s := range HandbookSections {
		lines[i] = s[0] + ": " + s[1]
	}
	return strings.Join(lines, "\n")
}

// Section is the input of handbook_section.
type Section struct {
	Title string `json:"title" jsonschema:"the section's title, such as Releases"`
}

// Handbook returns the handbook group.
func Handbook() worker.Group { return handbookGroup(nil) }

func handbookGroup(wrap Wrap) worker.Group {
	read := tool.MustFunc(HandbookTool, HandbookToolDesc, func(context.Context, none) (string, error) {
		return HandbookText(), nil
	}, tool.Idempotent())
	section := tool.MustFunc(HandbookSectionTool, HandbookSectionDesc, func(_ context.Context, in Section) (string, error) {
		for _, s := range HandbookSections {
			if strings.EqualFold(s[0], strings.TrimSpace(in.Title)) {
				return s[0] + ": " + s[1], nil
			}
		}
		titles := make([]string, len(HandbookSections))
		for i, s := range HandbookSections {
			titles[i] = s[0]
		}
		return "", fmt.Errorf("the handbook has no section %q: its sections are %s", in.Title, strings.Join(titles, ", "))
	}, tool.Idempotent())
	tools := wrap.all([]tool.Tool{read, section})
	tools[0] = toolctx.OneShotPerLoop(tools[0], HandbookAdvice)
	return worker.Group{
		Role:        HandbookRole,
		Description: HandbookDescription,
		Provider:    "toolmesh",
		Version:     "1.0.0",
		Tools:       tools,
	}
}
