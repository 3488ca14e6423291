package bench

import (
	"encoding/json"
	"testing"
)

// TestFirstRequestTools measures the size of the first request's tool definitions for
// 1,000 tools, flat and in 10 facades of 100. It is a size, not a timing, so the goal
// (at least 50 times smaller) is asserted here as well as reported.
func TestFirstRequestTools(t *testing.T) {
	folded, flat, foldedSpecs, flatSpecs := firstRequests(t, 10, 100, 0)
	if len(foldedSpecs) != 10 || len(flatSpecs) != 1000 {
		t.Fatalf("got %d and %d tool definitions, want 10 and 1000", len(foldedSpecs), len(flatSpecs))
	}
	for _, s := range []map[string]any{foldedSpecs[0], flatSpecs[0]} {
		name, _ := s["name"].(string)
		description, _ := s["description"].(string)
		if _, ok := s["parameters"].(map[string]any); name == "" || description == "" || !ok {
			t.Errorf("tool definition %v lacks a name, a description or parameters", s)
		}
	}
	ratio := float64(len(flat)) / float64(len(folded))
	t.Logf("first request tool definitions: flat %d bytes (~%d tokens), 10 facades %d bytes (~%d tokens), %.1fx fewer",
		len(flat), len(flat)/4, len(folded), len(folded)/4, ratio)
	if ratio < 50 {
		t.Errorf("facades make the first request only %.1fx smaller, want at least 50x", ratio)
	}
	if _, _, err := firstRequestTools(t.Context(), 0, 1, 0); err == nil {
		t.Error("no facades: want an error")
	}
}

// TestFirstRequestTools10k: 10,000 tools in 100 facades of 100, grouped under 10 parent
// facades: the first request carries the 10 parents, at least 500 times fewer bytes
// than the 10,000 tools flat. A size, not a timing.
func TestFirstRequestTools10k(t *testing.T) {
	folded, flat, foldedSpecs, flatSpecs := firstRequests(t, 100, 100, 10)
	if len(foldedSpecs) != 10 || len(flatSpecs) != 10000 {
		t.Fatalf("got %d and %d tool definitions, want 10 and 10000", len(foldedSpecs), len(flatSpecs))
	}
	if ratio := float64(len(flat)) / float64(len(folded)); ratio < 500 {
		t.Errorf("nested facades make the first request only %.1fx smaller, want at least 500x", ratio)
	}
	if _, _, err := firstRequestTools(t.Context(), 10, 1, 3); err == nil {
		t.Error("domains that do not divide the facades: want an error")
	}
}

// firstRequests is firstRequestTools, checked, with the definitions decoded.
func firstRequests(t *testing.T, facades, toolsPerFacade, domains int) (folded, flat []byte, foldedSpecs, flatSpecs []map[string]any) {
	t.Helper()
	folded, flat, err := firstRequestTools(t.Context(), facades, toolsPerFacade, domains)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(folded, &foldedSpecs); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(flat, &flatSpecs); err != nil {
		t.Fatal(err)
	}
	return folded, flat, foldedSpecs, flatSpecs
}
