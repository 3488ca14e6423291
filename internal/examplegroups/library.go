package examplegroups

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// The library group shows the facade options and return-direct tools across the mesh:
// checkout_desk is an exclusive facade (once called, the model sees only its tools),
// reading_room a facade without guide and context tools, shelves a by-category facade
// with both, and library_card a tool whose result is the run's final answer. Its books
// and its dictionary are fixed data, the same on every replica; nothing outside the
// process is contacted, and no call changes anything.

// Library group texts.
const (
	LibraryRole        = "library"
	LibraryDescription = "Library tools: find books, read them, borrow and return them, and show a library card"
	LibraryUsageNotes  = "Use shelves to find books and words, reading_room to read a book's opening, checkout_desk to borrow or return a book, library_card to show a member's card."

	// CheckoutDeskFacade is exclusive: calling it leaves the model only borrow_book and
	// return_book (and the facade's guide and context tools).
	CheckoutDeskFacade      = "checkout_desk"
	CheckoutDeskDescription = "Checkout desk: borrow and return books; the other library tools are put away while you are at the desk"
	CheckoutDeskUsageNotes  = "Use borrow_book to take a book home and return_book to bring it back. Give the exact title."

	// ReadingRoomFacade has neither a guide tool nor a context tool.
	ReadingRoomFacade      = "reading_room"
	ReadingRoomDescription = "Reading room: list the library's books and read their opening lines"

	// ShelvesFacade opens one category of the shelves, or all of them for a category it
	// does not list.
	ShelvesFacade          = "shelves"
	ShelvesDescription     = "Library shelves: find novels and look up words"
	ShelvesUsageNotes      = "Use find_novel to search novels by title or author, define_word for the meaning of a word, opening_hours for when the library is open."
	ShelvesFictionCategory = "fiction"
	ShelvesRefCategory     = "reference"

	// LibraryCardTool returns directly: its answer ends the run.
	LibraryCardTool        = "library_card"
	LibraryCardDescription = "Show a member's library card. The card is the final answer: nothing is said after it."

	// OpeningHours is what opening_hours answers.
	OpeningHours = "Open Monday to Friday 9:00-18:00 and Saturday 10:00-14:00; closed on Sunday."
)

// Book is a book of the library.
type Book struct {
	Title, Author string
	Year          int
	Opening       string // its first sentence
}

// libraryBooks are the library's books, in the order list_titles shows them.
var libraryBooks = []Book{
	{"Emma", "Jane Austen", 1815, "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, seemed to unite some of the best blessings of existence; and had lived nearly twenty-one years in the world with very little to distress or vex her."},
	{"Moby-Dick", "Herman Melville", 1851, "Call me Ishmael."},
	{"Pride and Prejudice", "Jane Austen", 1813, "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife."},
}

// libraryWords is the dictionary of define_word.
var libraryWords = map[string]string{
	"colophon": "a note at the end of a book about how it was made",
	"folio":    "a sheet folded once, or a book of such sheets",
	"octavo":   "a sheet folded three times into eight leaves, or a book of such sheets",
}

// BookTitle is the input of the tools that take a book.
type BookTitle struct {
	Title string `json:"title" jsonschema:"the book's exact title, such as Emma"`
}

// NovelQuery is find_novel's input.
type NovelQuery struct {
	Query string `json:"query" jsonschema:"part of the title or the author's name"`
}

// Word is define_word's input.
type Word struct {
	Word string `json:"word" jsonschema:"the word to look up"`
}

// Member is library_card's input.
type Member struct {
	Member string `json:"member" jsonschema:"the member's card number, such as L-1024"`
}

// Library returns the library group: the facades checkout_desk, reading_room and
// shelves, and the tool library_card.
func Library() worker.Group { return libraryGroup(nil) }

func libraryGroup(wrap Wrap) worker.Group {
	desk := wrap.all([]tool.Tool{
		tool.MustFunc("borrow_book", "Borrow a book of the library for 21 days", func(_ context.Context, in BookTitle) (string, error) {
			b, err := findBook(in.Title)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("Borrowed '%s' by %s: due back in 21 days.", b.Title, b.Author), nil
		}),
		tool.MustFunc("return_book", "Return a borrowed book", func(_ context.Context, in BookTitle) (string, error) {
			b, err := findBook(in.Title)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("Returned '%s'. Thank you.", b.Title), nil
		}),
	})
	room := wrap.all([]tool.Tool{
		tool.MustFunc("list_titles", "List the library's books with their authors and years", func(context.Context, none) (string, error) {
			lines := make([]string, len(libraryBooks))
			for i, b := range libraryBooks {
				lines[i] = fmt.Sprintf("%s (%s, %d)", b.Title, b.Author, b.Year)
			}
			return strings.Join(lines, "\n"), nil
		}, tool.Idempotent()),
		tool.MustFunc("read_opening", "Read the first sentence of a book", func(_ context.Context, in BookTitle) (string, error) {
			b, err := findBook(in.Title)
			if err != nil {
				return "", err
			}
			return b.Title + " opens: " + b.Opening, nil
		}, tool.Idempotent()),
	})
	fiction := wrap.all([]tool.Tool{tool.MustFunc("find_novel", "Find novels by part of the title or the author's name", findNovel, tool.Idempotent())})
	reference := wrap.all([]tool.Tool{
		tool.MustFunc("define_word", "Look up a word in the library's dictionary", defineWord, tool.Idempotent()),
		tool.MustFunc("opening_hours", "Tell when the library is open", func(context.Context, none) (string, error) {
			return OpeningHours, nil
		}, tool.Idempotent()),
	})
	card := tool.MustFunc(LibraryCardTool, LibraryCardDescription, func(_ context.Context, in Member) (string, error) {
		m := strings.TrimSpace(in.Member)
		if m == "" {
			return "", errors.New("give the member's card number")
		}
		return "Library card " + m + ": valid, no books overdue, no fines due.", nil
	}, tool.ReturnDirect(), tool.Idempotent())
	return worker.Group{
		Role:        LibraryRole,
		Description: LibraryDescription,
		UsageNotes:  LibraryUsageNotes,
		Provider:    "toolmesh",
		Version:     "1.0.0",
		Tools:       wrap.all([]tool.Tool{card}),
		Facades: []tool.Facade{
			tool.Of(CheckoutDeskFacade, CheckoutDeskDescription, desk, tool.Exclusive(), tool.UsageNotes(CheckoutDeskUsageNotes)),
			tool.Of(ReadingRoomFacade, ReadingRoomDescription, room, tool.NoGuideTool(), tool.NoContextTool()),
			tool.ByCategory(ShelvesFacade, ShelvesDescription, []tool.Category{
				{Name: ShelvesFictionCategory, Tools: fiction},
				{Name: ShelvesRefCategory, Tools: reference},
			}, tool.UsageNotes(ShelvesUsageNotes)),
		},
	}
}

// findBook returns the book with the title, compared without regard to case.
func findBook(title string) (Book, error) {
	for _, b := range libraryBooks {
		if strings.EqualFold(b.Title, strings.TrimSpace(title)) {
			return b, nil
		}
	}
	return Book{}, fmt.Errorf("the library has no book titled '%s'", title)
}

func findNovel(_ context.Context, in NovelQuery) (string, error) {
	q := strings.ToLower(strings.TrimSpace(in.Query))
	var found []string
	for _, b := range libraryBooks {
		if q != "" && (strings.Contains(strings.ToLower(b.Title), q) || strings.Contains(strings.ToLower(b.Author), q)) {
			found = append(found, fmt.Sprintf("%s by %s (%d)", b.Title, b.Author, b.Year))
		}
	}
	if len(found) == 0 {
		return fmt.Sprintf("No novel matches '%s'.", in.Query), nil
	}
	return strings.Join(found, "\n"), nil
}

func defineWord(_ context.Context, in Word) (string, error) {
	w := strings.ToLower(strings.TrimSpace(in.Word))
	meaning, ok := libraryWords[w]
	if !ok {
		return "", fmt.Errorf("'%s' is not in the library's dictionary", in.Word)
	}
	return w + ": " + meaning, nil
}
