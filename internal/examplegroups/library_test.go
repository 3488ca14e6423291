package examplegroups_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestLibraryRegistration: the library group registers its facades with the options a
// worker's facade can carry (exclusive, usage notes, no guide tool, no context tool, by
// category) and library_card as a return-direct tool.
func TestLibraryRegistration(t *testing.T) {
	g := examplegroups.Library()
	if g.Role != "library" || g.Description != "Library tools: find books, read them, borrow and return them, and show a library card" ||
		g.UsageNotes != "Use shelves to find books and words, reading_room to read a book's opening, checkout_desk to borrow or return a book, library_card to show a member's card." {
		t.Errorf("group = %q %q %q", g.Role, g.Description, g.UsageNotes)
	}
	grs, err := groupRegistrations(g)
	if err != nil {
		t.Fatal(err)
	}
	want := []*toolpb.FacadeNode{
		{
			Definition: &toolpb.ToolDefinition{Name: "checkout_desk", InputSchemaJson: emptySchema,
				Description: "Checkout desk: borrow and return books; the other library tools are put away while you are at the desk"},
			Children:   toolChildren("borrow_book", "return_book"),
			Exclusive:  true,
			UsageNotes: "Use borrow_book to take a book home and return_book to bring it back. Give the exact title.",
		},
		{
			Definition: &toolpb.ToolDefinition{Name: "reading_room", InputSchemaJson: emptySchema,
				Description: "Reading room: list the library's books and read their opening lines"},
			Children:      toolChildren("list_titles", "read_opening"),
			NoGuideTool:   true,
			NoContextTool: true,
		},
		{
			Definition: &toolpb.ToolDefinition{Name: "shelves",
				Description:     "Library shelves: find novels and look up words",
				InputSchemaJson: `{"type":"object","properties":{"category":{"type":"string","description":"Category to access. Available: fiction, reference","enum":["fiction","reference"]}},"required":["category"]}`},
			Children: toolChildren("find_novel", "define_word", "opening_hours"),
			Categories: []*toolpb.FacadeCategory{
				{Name: "fiction", Children: []string{"find_novel"}},
				{Name: "reference", Children: []string{"define_word", "opening_hours"}},
			},
			CategoryParameter: "category",
			UsageNotes:        "Use find_novel to search novels by title or author, define_word for the meaning of a word, opening_hours for when the library is open.",
		},
	}
	if diff := cmp.Diff(want, grs[0].GetFacades(), protocmp.Transform()); diff != "" {
		t.Errorf("library facade trees (-want +got):\n%s", diff)
	}
	direct := map[string]bool{}
	for _, rt := range grs[0].GetTools() {
		direct[rt.GetDefinition().GetName()] = rt.GetDefinition().GetReturnDirect()
	}
	wantDirect := map[string]bool{
		"borrow_book": false, "define_word": false, "find_novel": false, "library_card": true,
		"list_titles": false, "opening_hours": false, "read_opening": false, "return_book": false,
	}
	if diff := cmp.Diff(wantDirect, direct); diff != "" {
		t.Errorf("registered tools and their return_direct (-want +got):\n%s", diff)
	}
	card := grs[0].GetTools()[3].GetDefinition()
	if card.GetName() != "library_card" || card.GetDescription() != "Show a member's library card. The card is the final answer: nothing is said after it." ||
		card.GetInputSchemaJson() != `{"type":"object","properties":{"member":{"type":"string","description":"the member's card number, such as L-1024"}},"required":["member"],"additionalProperties":false}` {
		t.Errorf("library_card = %v", card)
	}
}

// TestLibraryFacadeAnswers: what calling each facade tells the model, usage notes after
// a blank line when the facade has them; a by-category facade opens every child for a
// category it does not list.
func TestLibraryFacadeAnswers(t *testing.T) {
	facades := map[string]tool.Facade{}
	for _, f := range examplegroups.Library().Facades {
		facades[f.Definition().Name] = f
	}
	const must = ". You MUST call one of these tools to complete the user's request. Do NOT respond with text \u2014 call a tool."
	for _, tc := range []struct{ facade, args, want string }{
		{"checkout_desk", `{}`, "Tools now available: borrow_book, return_book" + must +
			"\n\nUse borrow_book to take a book home and return_book to bring it back. Give the exact title."},
		{"reading_room", `{}`, "Tools now available: list_titles, read_opening" + must},
		{"shelves", `{"category":"fiction"}`, "Tools now available: find_novel" + must +
			"\n\nUse find_novel to search novels by title or author, define_word for the meaning of a word, opening_hours for when the library is open."},
		{"shelves", `{"category":"maps"}`, "Tools now available: find_novel, define_word, opening_hours" + must +
			"\n\nUse find_novel to search novels by title or author, define_word for the meaning of a word, opening_hours for when the library is open."},
	} {
		res, err := facades[tc.facade].Call(context.Background(), tc.args)
		if err != nil || res.IsError() || res.Content != tc.want {
			t.Errorf("%s(%s) = %q, %v\nwant %q", tc.facade, tc.args, res.Content, err, tc.want)
		}
	}
}

// TestLibraryTools: the library's tools answer from fixed data; an unknown book or word
// is an error result.
func TestLibraryTools(t *testing.T) {
	g := examplegroups.Library()
	for _, tc := range []struct {
		tool, args, want string
		isError          bool
	}{
		{"borrow_book", `{"title":"emma"}`, "Borrowed 'Emma' by Jane Austen: due back in 21 days.", false},
		{"borrow_book", `{"title":"Dracula"}`, "the library has no book titled 'Dracula'", true},
		{"return_book", `{"title":"Moby-Dick"}`, "Returned 'Moby-Dick'. Thank you.", false},
		{"list_titles", `{}`, "Emma (Jane Austen, 1815)\nMoby-Dick (Herman Melville, 1851)\nPride and Prejudice (Jane Austen, 1813)", false},
		{"read_opening", `{"title":"Moby-Dick"}`, "Moby-Dick opens: Call me Ishmael.", false},
		{"find_novel", `{"query":"austen"}`, "Emma by Jane Austen (1815)\nPride and Prejudice by Jane Austen (1813)", false},
		{"find_novel", `{"query":"Tolstoy"}`, "No novel matches 'Tolstoy'.", false},
		{"define_word", `{"word":"Folio"}`, "folio: a sheet folded once, or a book of such sheets", false},
		{"define_word", `{"word":"quire"}`, "'quire' is not in the library's dictionary", true},
		{"opening_hours", `{}`, "Open Monday to Friday 9:00-18:00 and Saturday 10:00-14:00; closed on Sunday.", false},
		{"library_card", `{"member":"L-1024"}`, "Library card L-1024: valid, no books overdue, no fines due.", false},
		{"library_card", `{"member":" "}`, "give the member's card number", true},
	} {
		res, err := find(t, g, tc.tool).Call(context.Background(), tc.args)
		if err != nil || res.IsError() != tc.isError || res.Content != tc.want {
			t.Errorf("%s(%s) = %v %q, %v; want error=%v %q", tc.tool, tc.args, res.Kind, res.Content, err, tc.isError, tc.want)
		}
	}
	if !find(t, g, "library_card").Metadata().ReturnDirect {
		t.Error("library_card does not return directly")
	}
}
