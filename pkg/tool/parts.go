package tool

import (
	"fmt"
	"strings"
)

// PartKind says what a Part holds.
type PartKind string

// The kinds of a Part, as MCP names its content.
const (
	PartText         PartKind = "text"
	PartImage        PartKind = "image"
	PartAudio        PartKind = "audio"
	PartResource     PartKind = "resource"      // an embedded resource: Text or Data, at URI
	PartResourceLink PartKind = "resource_link" // a resource named by URI, not carried
)

// Parts is a result's content as the tool gave it (see Result.Parts).
type Parts struct {
	Items []Part
}

// List is the parts, none for a nil p.
func (p *Parts) List() []Part {
	if p == nil {
		return nil
	}
	return p.Items
}

// Text is what a model that reads text alone gets of the parts: each part's text or
// placeholder (Part.Placeholder), a line each.
func (p *Parts) Text() string {
	lines := make([]string, 0, len(p.List()))
	for _, x := range p.List() {
		lines = append(lines, x.Placeholder())
	}
	return strings.Join(lines, "\n")
}

// Part is one piece of a result's content (see Result.Parts).
type Part struct {
	Kind PartKind
	// Text is a text part's text, or a text resource's.
	Text string
	// Data is an image's, audio's or binary resource's bytes; MediaType describes them
	// (or the resource's text).
	Data      []byte
	MediaType string
	// URI names a resource or a resource link; Name is a link's name.
	URI  string
	Name string
}

// Size is the bytes a part carries: its text and its data.
func (p Part) Size() int {
	return len(p.Text) + len(p.Data) + len(p.URI) + len(p.Name) + len(p.MediaType)
}

// Placeholder is the text that stands for a part that is not text, for a model that
// reads text alone: "[image: image/png, 70 bytes]", "[audio: audio/wav, 44 bytes]",
// "[resource: test://x, image/png, 70 bytes]", "[resource link: test://x]". A text part,
// or a resource of text, is its text.
func (p Part) Placeholder() string {
	switch p.Kind {
	case PartImage, PartAudio:
		return fmt.Sprintf("[%s: %s, %d bytes]", p.Kind, p.MediaType, len(p.Data))
	case PartResource:
		if p.Data == nil && p.Text != "" {
			return p.Text
		}
		if p.Data == nil {
			return fmt.Sprintf("[resource: %s]", p.URI)
		}
		return fmt.Sprintf("[resource: %s, %s, %d bytes]", p.URI, p.MediaType, len(p.Data))
	case PartResourceLink:
		return fmt.Sprintf("[resource link: %s]", p.URI)
	default:
		return p.Text
	}
}
