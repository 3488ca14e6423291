package mcp

import (
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// MaxResultParts bounds the content items of one MCP result (text, images, audio,
// resources): a result with more becomes an error the model reads.
const MaxResultParts = 256

// partsOf is a result's content as tool parts, in order, and the bytes they carry
// (decoded: an image's bytes, not its base64).
func partsOf(cs []sdk.Content) ([]tool.Part, int) {
	parts := make([]tool.Part, 0, len(cs))
	size := 0
	for _, c := range cs {
		var p tool.Part
		switch x := c.(type) {
		case *sdk.TextContent:
			p = tool.Part{Kind: tool.PartText, Text: x.Text}
		case *sdk.ImageContent:
			p = tool.Part{Kind: tool.PartImage, Data: x.Data, MediaType: x.MIMEType}
		case *sdk.AudioContent:
			p = tool.Part{Kind: tool.PartAudio, Data: x.Data, MediaType: x.MIMEType}
		case *sdk.ResourceLink:
			p = tool.Part{Kind: tool.PartResourceLink, URI: x.URI, Name: x.Name, MediaType: x.MIMEType}
		case *sdk.EmbeddedResource:
			if x.Resource == nil {
				continue
			}
			p = tool.Part{Kind: tool.PartResource, URI: x.Resource.URI, MediaType: x.Resource.MIMEType, Text: x.Resource.Text, Data: x.Resource.Blob}
		default:
			continue
		}
		size += p.Size()
		parts = append(parts, p)
	}
	return parts, size
}

// onlyText reports whether parts are at most one text: nothing a text result loses.
func onlyText(parts []tool.Part) bool {
	return len(parts) == 0 || len(parts) == 1 && parts[0].Kind == tool.PartText
}

// firstBlob is the first part with bytes (an image, audio, a binary resource), the
// result's artifact when the server sent no structured content.
func firstBlob(name string, parts []tool.Part) (tool.Artifact, bool) {
	for _, p := range parts {
		if p.Data != nil && tool.CheckMediaType(p.MediaType) == nil {
			return tool.Artifact{TypeName: "mcp." + name, Data: p.Data, MediaType: p.MediaType}, true
		}
	}
	return tool.Artifact{}, false
}

// resultOf maps an MCP result: isError to an error result; the content to the text the
// model reads (a placeholder for each part that is not text) and, when it holds more
// than one text, to the result's parts; structured content to an artifact with its
// JSON, else the first image, audio or binary resource to an artifact with its bytes.
func resultOf(name string, res *sdk.CallToolResult) tool.Result {
	if len(res.Content) > MaxResultParts {
		return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("tool '%s' ran, but its result has %d content items, over the %d a result may have, and was dropped. Call it again in a way that returns less.", name, len(res.Content), MaxResultParts))
	}
	parts, size := partsOf(res.Content)
	if size > MaxResultBytes {
		return tooLarge(name, size)
	}
	text := (&tool.Parts{Items: parts}).Text()
	if res.IsError {
		if text == "" {
			text = fmt.Sprintf("tool '%s' reported an error", name)
		}
		return tool.Error(text)
	}
	var out tool.Result
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if size+len(b) > MaxResultBytes {
			return tooLarge(name, size+len(b))
		}
		if err == nil {
			if text == "" {
				text = string(b)
			}
			out = tool.ArtifactResult(text, tool.Artifact{TypeName: "mcp." + name, JSON: b})
		}
	}
	if out.Artifact == nil {
		if a, ok := firstBlob(name, parts); ok {
			out = tool.ArtifactResult(text, a)
		} else {
			out = tool.Text(text)
		}
	}
	if !onlyText(parts) {
		out.Parts = &tool.Parts{Items: parts}
	}
	return out
}

// contentOf is a tool result's content for an MCP client: its parts as they came, else
// its text and, for an artifact that is an image or audio, that too (a worker tool's
// chart reaches the client as an image); another blob is an embedded resource.
func contentOf(res tool.Result) []sdk.Content {
	if parts := res.Parts.List(); len(parts) > 0 {
		out := make([]sdk.Content, 0, len(parts))
		for _, p := range parts {
			out = append(out, partContent(p))
		}
		return out
	}
	out := []sdk.Content{&sdk.TextContent{Text: res.Content}}
	a := res.Artifact
	if a == nil || a.Data == nil {
		return out
	}
	mt := a.MediaType
	if mt == "" {
		mt = "application/octet-stream"
	}
	switch {
	case strings.HasPrefix(mt, "image/"):
		return append(out, &sdk.ImageContent{Data: a.Data, MIMEType: mt})
	case strings.HasPrefix(mt, "audio/"):
		return append(out, &sdk.AudioContent{Data: a.Data, MIMEType: mt})
	default:
		return append(out, &sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: ArtifactURIPrefix + a.TypeName, MIMEType: mt, Blob: a.Data}})
	}
}

// ArtifactURIPrefix starts the URI of an embedded resource that carries a tool's blob
// artifact through the MCP endpoint (the artifact's type name follows): it names the
// artifact, and resources/read does not serve it.
const ArtifactURIPrefix = "toolmesh:artifact/"

func partContent(p tool.Part) sdk.Content {
	switch p.Kind {
	case tool.PartImage:
		return &sdk.ImageContent{Data: p.Data, MIMEType: p.MediaType}
	case tool.PartAudio:
		return &sdk.AudioContent{Data: p.Data, MIMEType: p.MediaType}
	case tool.PartResourceLink:
		return &sdk.ResourceLink{URI: p.URI, Name: p.Name, MIMEType: p.MediaType}
	case tool.PartResource:
		return &sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: p.URI, MIMEType: p.MediaType, Text: p.Text, Blob: p.Data}}
	default:
		return &sdk.TextContent{Text: p.Text}
	}
}
