package examplegroups

import (
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// Wrap changes each leaf tool of a built-in group before the group's facades are built
// over it (WithDelay's wrapper, say). A nil Wrap leaves the tools as they are.
type Wrap func(tool.Tool) tool.Tool

func (w Wrap) all(ts []tool.Tool) []tool.Tool {
	if w == nil {
		return ts
	}
	out := make([]tool.Tool, len(ts))
	for i, t := range ts {
		out[i] = w(t)
	}
	return out
}

// Delay is the Wrap that makes every call wait d first (see WithDelay).
func Delay(d time.Duration) Wrap {
	return func(t tool.Tool) tool.Tool { return delayed{t, d} }
}

// constructors maps the names of the built-in groups to their constructors.
func constructors() map[string]func(Wrap) worker.Group {
	return map[string]func(Wrap) worker.Group{
		MathRole:     mathGroup,
		TextRole:     textGroup,
		ShopRole:     shopGroup,
		FaultsRole:   faultsGroup,
		CRMRole:      crmGroup,
		UsersRole:    usersGroup,
		PaymentsRole: paymentsGroup,
		LibraryRole:  libraryGroup,
		DatabaseRole: databaseGroup,
		HandbookRole: handbookGroup,
	}
}

// Groups maps the names cmd/toolworker accepts to the groups.
func Groups() map[string]func() worker.Group {
	mks := constructors()
	out := make(map[string]func() worker.Group, len(mks))
	for name, mk := range mks {
		out[name] = func() worker.Group { return mk(nil) }
	}
	return out
}

// Group returns the built-in group of the given name: math, text, shop, or echo_<name>.
func Group(name string) (worker.Group, bool) { return GroupWith(name, nil) }

// GroupWith is Group with every leaf tool of the group changed by wrap.
func GroupWith(name string, wrap Wrap) (worker.Group, bool) {
	if rest, ok := strings.CutPrefix(name, EchoPrefix); ok && rest != "" {
		return contextEcho(rest, wrap), true
	}
	mk, ok := constructors()[name]
	if !ok {
		return worker.Group{}, false
	}
	return mk(wrap), true
}
