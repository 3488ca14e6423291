package wire

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// Bounds of the contract's fields. The proto states each one with its field; the
// orchestrator refuses a request over a bound with INVALID_ARGUMENT naming the field,
// and never echoes an oversized value (a long one is described by its length).
const (
	// MaxMessageBytes bounds every gRPC message toolmesh receives.
	MaxMessageBytes = 4 << 20
	// MaxPromptBytes bounds the text of a run: prompt, system prompt and messages.
	MaxPromptBytes = 1 << 20
	// MaxMessages bounds the earlier conversation of a run.
	MaxMessages = 1000
	// MaxRequestGroups and MaxRequestTools bound what a run or a listing asks for.
	MaxRequestGroups = 64
	MaxRequestTools  = 256
	// MaxModelBytes and MaxRoleBytes bound a run's choice of model.
	MaxModelBytes = 256
	MaxRoleBytes  = 64
	// MaxBlackboardTypes bounds the blackboard types a tool declares it reads;
	// MaxTypeNameBytes a type name and a binding name.
	MaxBlackboardTypes = 16
	MaxTypeNameBytes   = 256
	// MaxOnceAdviceBytes bounds a once-per-loop tool's advice.
	MaxOnceAdviceBytes = 4 << 10
	// MaxBlackboardUpdates and MaxBlackboardUpdateBytes bound what one tool call adds to
	// the blackboard.
	MaxBlackboardUpdates     = 256
	MaxBlackboardUpdateBytes = 1 << 20
	// MaxEventBlobBytes bounds the data of a blob one run event carries: a larger blob's
	// event has its type name, media type and size, without its data (GetRun has it).
	MaxEventBlobBytes = 1 << 20
	// MaxProgressBytes bounds one progress report; MaxProgressReports the reports of one
	// call that reach the client (later ones are dropped).
	MaxProgressBytes   = 1 << 10
	MaxProgressReports = 1000
	// MaxSchemaBytes bounds a JSON Schema: a tool's input schema, a run's output schema.
	// It is the bound pkg/schema holds every schema to, checked here first so that an
	// oversized one is refused before it is parsed.
	MaxSchemaBytes = schema.MaxBytes
	// MaxReasonBytes bounds the free-text reasons of a cancellation and of a drain.
	MaxReasonBytes = 1 << 10
	// MaxAddressBytes bounds a worker's address (a DNS name of 253 bytes and a port).
	MaxAddressBytes = 261
	// MaxVersionBytes bounds a worker's or a group's version, MaxProviderBytes a group's
	// provider.
	MaxVersionBytes  = 128
	MaxProviderBytes = 128
	// MaxRegistrationGroups bounds the groups of one registration, MaxGroupTools the
	// tools of one group.
	MaxRegistrationGroups = 64
	MaxGroupTools         = 10000
	// MaxDescriptionBytes bounds a tool's or a group's description, and usage notes.
	MaxDescriptionBytes = 8 << 10
	// Definition metadata: entries, key and value sizes.
	MaxMetadataEntries    = 64
	MaxMetadataKeyBytes   = 256
	MaxMetadataValueBytes = 4 << 10
	// MaxContextKeyBytes bounds a key of a run's ToolCallContext; MaxContextEntries the
	// entries of one level (the run's or the interaction's).
	MaxContextKeyBytes = 256
	MaxContextEntries  = 1024
)

// Identifier rules. Tool names follow the strictest model API's rule.
var (
	RunIDRE    = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)
	WorkerIDRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,253}$`)
	ToolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	RoleRE     = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)
)

// CheckID checks an identifier against its rule without echoing it: a long one is
// described by its length only. It returns "" when id is valid.
func CheckID(id string, re *regexp.Regexp, maxBytes int) string {
	switch {
	case id == "":
		return "is empty"
	case len(id) > maxBytes:
		return fmt.Sprintf("is %d bytes; the limit is %d", len(id), maxBytes)
	case !re.MatchString(id):
		return fmt.Sprintf("%q must match %s", id, re)
	}
	return ""
}

// CheckText checks a free-text field: valid UTF-8 of at most maxBytes. It returns ""
// when s is valid.
func CheckText(s string, maxBytes int) string {
	switch {
	case len(s) > maxBytes:
		return fmt.Sprintf("is %d bytes; the limit is %d", len(s), maxBytes)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	}
	return ""
}

// CheckPrintable is CheckText for a field shown on one line (a version): it also refuses
// control characters.
func CheckPrintable(s string, maxBytes int) string {
	if p := CheckText(s, maxBytes); p != "" {
		return p
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Sprintf("holds the unprintable character %U", r)
		}
	}
	return ""
}

// Truncate shortens s for a log line or a message: at most n bytes, cut at a rune
// boundary, with the length said when it was cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
}

// Cut shortens s to at most n bytes, cut at a rune boundary, with nothing added: for a
// value that must stay within its bound, such as a progress report.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Bounds of a by-category facade: its categories are an enum of the model-visible
// schema, so they are few, short and printable.
const (
	MaxFacadeCategories = 256
	MaxCategoryBytes    = 64
)

// CheckCategories checks the categories and the category parameter of a facade node
// whose children are children, and returns the problems found, each a phrase such as
// `category "c" names "a" twice`; none when the node is valid. The worker SDK checks a
// facade with it before registering, the orchestrator when a registration arrives.
func CheckCategories(n *toolpb.FacadeNode, children map[string]bool) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if len(n.GetCategories()) > MaxFacadeCategories {
		add("has %d categories; the limit is %d", len(n.GetCategories()), MaxFacadeCategories)
		return out
	}
	if p := n.GetCategoryParameter(); p != "" {
		if msg := CheckID(p, ToolNameRE, 64); msg != "" {
			add("category_parameter %s", msg)
		}
	}
	names := map[string]bool{}
	for i, cat := range n.GetCategories() {
		name := cat.GetName()
		if msg := CheckPrintable(name, MaxCategoryBytes); msg != "" || strings.TrimSpace(name) == "" {
			if msg == "" {
				msg = "is blank"
			}
			add("category %d's name %s", i, msg)
			continue
		}
		if names[name] {
			add("category %q is declared twice", name)
			continue
		}
		names[name] = true
		if len(cat.GetChildren()) > len(children) {
			add("category %q has %d children, more than the facade's %d", name, len(cat.GetChildren()), len(children))
			continue
		}
		seen := map[string]bool{}
		for _, c := range cat.GetChildren() {
			switch {
			case !children[c]:
				add("category %q names %q, which is not one of its children", name, Truncate(c, 64))
			case seen[c]:
				add("category %q names %q twice", name, c)
			}
			seen[c] = true
		}
	}
	return out
}

// The HTTP/2 flow-control windows of the mesh's gRPC connections, fixed: a fixed window
// also turns off grpc-go's bandwidth-delay estimation, whose PING frames (one each way
// for a burst of data, a wake-up and a system call on both sides) cost a streamed run
// about as many frames as its events. ReceiveStreamWindow is what a peer may send on one
// call before it is read, ReceiveConnWindow on a connection; a side that receives large
// messages promptly (the router's results, a client's events) takes them at full speed
// on a LAN with these.
const (
	ReceiveStreamWindow = 1 << 20
	ReceiveConnWindow   = 16 << 20
)
