package progressive_test

import (
	"encoding/json"
	"testing"

	"github.com/toolmesh/toolmesh/internal/progressive"
)

// TestFirstRequestTools measures the size of the first request's tool definitions for
// 1,000 tools, flat and in 10 facades of 100. It is a size, not a timing, so the goal
// (at least 50 times smaller) is asserted here; the bench harness reports it too.
func TestFirstRequestTools(t *testing.T) {
	folded, flat, err := progressive.FirstRequestTools(t.Context(), 10, 100)
	if err != nil {
		t.Fatal(err)
	}
	var foldedSpecs, flatSpecs []map[string]any
	if err := json.Unmarshal(folded, &foldedSpecs); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(flat, &flatSpecs); err != nil {
		t.Fatal(err)
	}
	if len(foldedSpecs) != 10 || len(flatSpecs) != 1000 {
		t.Fatalf("got %d and %d tool definitions, want 10 and 1000", len(foldedSpecs), len(flatSpecs))
	}
	ratio := float64(len(flat)) / float64(len(folded))
	t.Logf("first request tool definitions: flat %d bytes (~%d tokens), 10 facades %d bytes (~%d tokens), %.1fx fewer",
		len(flat), len(flat)/4, len(folded), len(folded)/4, ratio)
	if ratio < 50 {
		t.Errorf("facades make the first request only %.1fx smaller, want at least 50x", ratio)
	}
	if _, _, err := progressive.FirstRequestTools(t.Context(), 0, 1); err == nil {
		t.Error("no facades: want an error")
	}
}
