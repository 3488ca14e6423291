package scripted

import "testing"

// A template without actions is answered with its text, without running it; one with
// an action is run.
func TestPlainText(t *testing.T) {
	for src, want := range map[string]bool{"done": true, "": true, "line one\nline two": true, "turn {{turn}}": false, "{{user}}": false} {
		tmpl, err := parseTemplate("t", src)
		if err != nil {
			t.Fatal(err)
		}
		text, plain := plainText(tmpl)
		if plain != want || (plain && text != src) {
			t.Errorf("plainText(%q) = %q, %v; want plain %v", src, text, plain, want)
		}
		got, err := execute(tmpl, &view{turn: 3, user: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		if plain && got != src {
			t.Errorf("execute(%q) = %q", src, got)
		}
		if src == "turn {{turn}}" && got != "turn 3" {
			t.Errorf("execute(%q) = %q, want %q", src, got, "turn 3")
		}
	}
}
