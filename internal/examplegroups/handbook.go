package examplegroups

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// The handbook group shows a one-shot tool across replicas: read_handbook runs at most
// once per tool loop, whichever replica serves it, because the worker registers it as
// once per loop and the orchestrator answers the repeated calls of a loop itself. Its
// replicas keep no count of their own. handbook_poster returns a blob, a PNG, as its
// artifact: it reaches sinks, assets and the blackboard as a JSON artifact does.

// Handbook group texts.
const (
	HandbookRole        = "handbook"
	HandbookDescription = "The team handbook: how the team works"
	HandbookTool        = "read_handbook"
	HandbookToolDesc    = "Read the whole team handbook. It does not change during a task: read it once."
	HandbookAdvice      = "Follow the handbook above."
	HandbookSectionTool = "handbook_section"
	HandbookSectionDesc = "Read one section of the team handbook by its title"
	HandbookPosterTool  = "handbook_poster"
	HandbookPosterDesc  = "Render the handbook's poster for the team room, a PNG image"
	// HandbookPosterType is the type name of the poster's artifact, a blob of
	// image/png.
	HandbookPosterType = "handbook.Poster"
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

// Section is the input of handbook_section: its schema lists the titles (an enum), so
// the orchestrator refuses any other title before the call leaves.
type Section struct {
	Title string `json:"title" jsonschema:"the section's title" enum:"Releases,Reviews,On call"`
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
	poster := tool.New(HandbookPosterTool, HandbookPosterDesc, schema.Empty(), func(context.Context, string) (tool.Result, error) {
		b, err := HandbookPoster()
		if err != nil {
			return tool.Result{}, err
		}
		return tool.ArtifactResult(fmt.Sprintf("Rendered the poster (image/png, %d bytes)", len(b)),
			tool.Artifact{TypeName: HandbookPosterType, Data: b, MediaType: "image/png"}), nil
	}, tool.Idempotent())
	tools := wrap.all([]tool.Tool{read, section, poster})
	tools[0] = toolctx.OneShotPerLoop(tools[0], HandbookAdvice)
	return worker.Group{
		Role:        HandbookRole,
		Description: HandbookDescription,
		Provider:    "toolmesh",
		Version:     "1.0.0",
		Tools:       tools,
	}
}

// HandbookPoster is the poster handbook_poster renders: a PNG of 48×16 pixels, one band
// of colour per section, always the same bytes.
func HandbookPoster() ([]byte, error) {
	img := image.NewNRGBA(image.Rect(0, 0, 48, 16))
	for x := range 48 {
		band := x * len(HandbookSections) / 48
		c := color.NRGBA{R: uint8(80 * band), G: 120, B: uint8(255 - 80*band), A: 255}
		for y := range 16 {
			img.SetNRGBA(x, y, c)
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
