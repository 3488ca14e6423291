package examplegroups

import (
	"context"
	"strconv"
	"strings"
	"unicode"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// Text group texts.
const (
	TextRole        = "text"
	TextDescription = "Text tools: use when you need to count, transform or inspect text exactly"
	TextUsageNotes  = "Use word_count to count words, uppercase/lowercase to change case, reverse to reverse the characters of a text."
)

// Text is the input of the text tools.
type Text struct {
	Text string `json:"text" jsonschema:"the text"`
}

// TextGroup returns the text group: word_count, uppercase, lowercase, reverse.
func TextGroup() worker.Group { return textGroup(nil) }

func textGroup(wrap Wrap) worker.Group {
	fn := func(name, desc string, op func(string) string) tool.Tool {
		return tool.MustFunc(name, desc, func(_ context.Context, in Text) (string, error) {
			return op(in.Text), nil
		}, tool.Idempotent())
	}
	return worker.Group{
		Role:        TextRole,
		Description: TextDescription,
		UsageNotes:  TextUsageNotes,
		Provider:    "toolmesh",
		Version:     "1.0.0",
		Tools: wrap.all([]tool.Tool{
			fn("word_count", "Count the words of a text (runs of letters, digits, apostrophes or hyphens)", func(s string) string {
				return strconv.Itoa(len(strings.FieldsFunc(s, func(r rune) bool {
					return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\'' && r != '-'
				})))
			}),
			fn("uppercase", "Convert a text to upper case", strings.ToUpper),
			fn("lowercase", "Convert a text to lower case", strings.ToLower),
			fn("reverse", "Reverse the characters of a text", func(s string) string {
				rs := []rune(s)
				for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
					rs[i], rs[j] = rs[j], rs[i]
				}
				return string(rs)
			}),
		}),
	}
}
