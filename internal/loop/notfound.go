package loop

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// NotFoundPolicy decides what the model hears when it names a tool that does not exist.
// A policy value holds per-loop state: every loop gets its own, so that the misses of
// one loop never count against another.
type NotFoundPolicy interface {
	// Handle returns the feedback for the model, or an error that ends the loop.
	Handle(requested string, available []string) (feedback string, err error)
	// Found tells the policy that a call named an existing tool.
	Found()
}

// ToolNotFoundError ends a loop that kept naming tools that do not exist.
type ToolNotFoundError struct {
	Requested string
	Available []string
}

func (e *ToolNotFoundError) Error() string {
	return fmt.Sprintf("Tool '%s' not found. Available tools: [%s]", e.Requested, strings.Join(e.Available, ", "))
}

// AutoCorrection feeds the model the list of tools and the closest names, and gives up
// after MaxRetries consecutive misses. Defaults: 3 retries, tokens of at least 3
// characters, similarity at least 0.25.
type AutoCorrection struct {
	MaxRetries         int
	MinTokenLength     int
	MinTokenSimilarity float64

	misses int
}

// NewAutoCorrection returns the default policy, with fresh state.
func NewAutoCorrection() *AutoCorrection {
	return &AutoCorrection{MaxRetries: 3, MinTokenLength: 3, MinTokenSimilarity: 0.25}
}

// Found resets the consecutive-miss counter.
func (p *AutoCorrection) Found() { p.misses = 0 }

// Handle implements NotFoundPolicy.
func (p *AutoCorrection) Handle(requested string, available []string) (string, error) {
	p.misses++
	if p.misses > p.MaxRetries {
		return "", &ToolNotFoundError{Requested: requested, Available: available}
	}
	suggestion := ""
	switch m := p.suggest(requested, available); len(m) {
	case 0:
	case 1:
		suggestion = fmt.Sprintf(" Did you mean '%s'?", m[0])
	default:
		quoted := make([]string, len(m))
		for i, n := range m {
			quoted[i] = "'" + n + "'"
		}
		suggestion = fmt.Sprintf(" Possible matches: [%s].", strings.Join(quoted, ", "))
	}
	return fmt.Sprintf("Tool '%s' does not exist.%s Available tools: [%s]. Use the exact tool name from this list. Do not combine or prefix tool names — tool names found in source code or search results are not callable.",
		requested, suggestion, strings.Join(available, ", ")), nil
}

var nonAlnum = regexp.MustCompile(`[^a-z0-9]`)

func normalize(s string) string { return nonAlnum.ReplaceAllString(strings.ToLower(s), "") }

// suggest finds likely intended names: an exact match after normalisation, else the
// best token-overlap matches.
func (p *AutoCorrection) suggest(requested string, available []string) []string {
	norm := normalize(requested)
	var exact []string
	for _, a := range available {
		if norm != "" && normalize(a) == norm {
			exact = append(exact, a)
		}
	}
	if len(exact) > 0 {
		return exact
	}
	rt := p.tokens(requested)
	if len(rt) == 0 {
		return nil
	}
	type scored struct {
		name  string
		score float64
	}
	var ss []scored
	for _, a := range available {
		at := p.tokens(a)
		if len(at) == 0 {
			continue
		}
		s := jaccard(rt, at)
		lr, la := strings.ToLower(requested), strings.ToLower(a)
		if strings.Contains(lr, la) || strings.Contains(la, lr) {
			s = min(s+0.2, 1.0)
		}
		if s >= p.MinTokenSimilarity {
			ss = append(ss, scored{a, s})
		}
	}
	if len(ss) == 0 {
		return nil
	}
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].score > ss[j].score })
	if len(ss) == 1 || ss[0].score >= 2*ss[1].score {
		return []string{ss[0].name}
	}
	n := min(3, len(ss))
	out := make([]string, n)
	for i := range n {
		out[i] = ss[i].name
	}
	return out
}

var camelBoundary = regexp.MustCompile(`([a-z])([A-Z])`)
var tokenSplit = regexp.MustCompile(`[^a-zA-Z0-9]+`)

// tokens splits a name at camelCase boundaries and non-alphanumeric runs.
func (p *AutoCorrection) tokens(name string) map[string]bool {
	spaced := camelBoundary.ReplaceAllString(name, "$1 $2")
	out := map[string]bool{}
	for _, t := range tokenSplit.Split(spaced, -1) {
		for _, part := range strings.Fields(t) {
			part = strings.ToLower(part)
			if len(part) >= p.MinTokenLength {
				out[part] = true
			}
		}
	}
	return out
}

func jaccard(a, b map[string]bool) float64 {
	inter := 0
	for t := range a {
		if b[t] {
			inter++
		}
	}
	union := len(a) + len(b) - inter
	if union == 0 {
		return 0
	}
	return float64(inter) / float64(union)
}
