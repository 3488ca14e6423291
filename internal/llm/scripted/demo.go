package scripted

import _ "embed"

// DemoPrompt is the question the demo script answers.
const DemoPrompt = "What is (12.5 + 7.5) * 3, how many words are in 'the quick brown fox', and how does it read in capitals?"

//go:embed demo.yaml
var demoYAML string

// Demo returns the embedded demo script (demo.yaml). It answers DemoPrompt in five model
// calls with the mesh's built-in tools: the math facade and word_count in parallel, then
// add, multiply and uppercase one by one, then a final answer that quotes their results.
// To any other question it says what it is.
func Demo() Script {
	s, err := Parse([]byte(demoYAML))
	if err != nil {
		panic("scripted: embedded demo script: " + err.Error()) // pinned by TestDemoParses
	}
	return s
}
