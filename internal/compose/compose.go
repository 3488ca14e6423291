// Package compose builds an orchestrator's run service from its config and what the
// program embedding it adds: the converters of the tool groups, the MCP groups, the
// program's layers, strategies, sinks, formatter and in-process groups. It holds no
// process state; pkg/orchestrator (and test harnesses) put the gRPC server over the
// service and own the listeners, the journal and the shutdown.
package compose

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"

	"github.com/toolmesh/toolmesh/internal/celexpr"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/credentials"
	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/mcp"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/pkg/trust"
)

// Options are what Services builds from. Router and a provider are required.
type Options struct {
	Config config.Config
	Router *router.Router
	// Providers are the model providers by name, DefaultProvider the one of runs that
	// name none; Provider, when Providers is empty, is the only one.
	Providers       map[string]llm.Provider
	DefaultProvider string
	Provider        llm.Provider
	Telemetry       *telemetry.Telemetry
	Logger          *slog.Logger
	// Journal records runs (nil: in memory only); Owner names this orchestrator in its
	// leases.
	Journal runlog.Store
	Owner   string
	// Codec is the API's: the wire forms the journal keeps (server.RunCodec).
	Codec run.Codec

	// Converters are the groups' converters (Converters); nil builds them from the
	// config alone. The router must use the same.
	Converters func(group string) ctxconv.Converter
	// Credentials are the groups' own credentials (groups.<role>.token_exchange,
	// groups.<role>.secrets); nil builds them from the config. The router must use the
	// same (router.Options.Credentials).
	Credentials *credentials.Set
	// MCPFilters narrow an MCP group's tools further than the config does, by role.
	MCPFilters map[string]func(mcp.ToolInfo) bool
	// Sinks, Layers, Strategies, Formatter and Groups are the program's own, as
	// run.Options has them.
	Sinks      map[string]decorators.Sink
	Layers     []run.Placed
	Strategies []loop.Strategy
	Formatter  process.Formatter
	Groups     map[string]run.Group
}

// Runs builds the run service.
func Runs(o Options) (*run.Service, error) {
	if o.Router == nil {
		return nil, errors.New("compose: Router is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	providers, def := o.Providers, o.DefaultProvider
	if len(providers) == 0 && o.Provider != nil {
		providers = map[string]llm.Provider{o.Provider.Name(): o.Provider}
		def = o.Provider.Name()
	}
	conv := o.Converters
	if conv == nil {
		var err error
		if conv, err = Converters(o.Config, nil); err != nil {
			return nil, err
		}
	}
	creds := o.Credentials
	if creds == nil {
		var err error
		if creds, err = credentials.FromConfig(o.Config, o.Logger); err != nil {
			return nil, err
		}
	}
	groups, err := MCPGroups(o.Config, conv, creds, o.MCPFilters, o.Logger)
	if err != nil {
		return nil, err
	}
	return run.New(run.Options{
		Router: o.Router, Providers: providers, DefaultProvider: def, Config: o.Config,
		Telemetry: o.Telemetry, Logger: o.Logger, Sinks: o.Sinks, MCP: groups,
		Journal: o.Journal, Codec: o.Codec, Owner: o.Owner,
		Layers: o.Layers, Strategies: o.Strategies, Formatter: o.Formatter, Groups: o.Groups,
	})
}

// MCPGroups builds the groups MCP servers serve (groups.<role>.mcp), each with its
// group's converter, its credentials and its filters (the config's include, exclude and
// filter, then the program's); none connects before a run asks for it.
func MCPGroups(cfg config.Config, conv func(string) ctxconv.Converter, creds *credentials.Set, filters map[string]func(mcp.ToolInfo) bool, log *slog.Logger) (map[string]*mcp.Group, error) {
	for role := range filters {
		if g, ok := cfg.Groups[role]; !ok || g.MCP == nil {
			return nil, fmt.Errorf("compose: an MCP filter for group %q, which no MCP server serves (groups.%s.mcp)", role, role)
		}
	}
	out := map[string]*mcp.Group{}
	for role, g := range cfg.Groups {
		if g.MCP == nil {
			continue
		}
		sc := cfg.MCPServers[g.MCP.Server]
		var tc *tls.Config
		if t := sc.TLS; t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" {
			var err error
			if tc, err = trust.HTTPSConfig(t.CAFile, t.CertFile, t.KeyFile); err != nil {
				return nil, fmt.Errorf("mcp_servers.%s.tls: %w", g.MCP.Server, err)
			}
		}
		filter, err := mcpFilter(g.MCP, filters[role], log.With("group", role))
		if err != nil {
			return nil, fmt.Errorf("groups.%s.mcp.%w", role, err)
		}
		var own func(ctx context.Context) (map[string]string, map[string]string, error)
		if creds.Has(role) {
			own = func(ctx context.Context) (map[string]string, map[string]string, error) {
				d, err := creds.For(ctx, role)
				return d.Context, d.Headers, err
			}
		}
		grp, err := mcp.New(mcp.Options{
			Server: mcp.Server{Name: g.MCP.Server, Command: sc.Command, Args: sc.Args, Env: sc.Env, Dir: sc.Dir,
				URL: sc.URL, Headers: sc.Headers, ContextHeaders: sc.ContextHeaders, Timeout: sc.Timeout.D(), TLS: tc,
				ProtocolVersion: sc.ProtocolVersion},
			Role: role, Filter: filter, Converter: conv(role), Credentials: own, Logger: log,
		})
		if err != nil {
			return nil, fmt.Errorf("groups.%s.mcp: %w", role, err)
		}
		out[role] = grp
	}
	return out, nil
}

// mcpFilter is an MCP group's filter: its globs, its CEL filter, its CEL exclusion and
// the program's predicate, all of which must keep a tool.
func mcpFilter(g *config.GroupMCP, code func(mcp.ToolInfo) bool, log *slog.Logger) (func(mcp.ToolInfo) bool, error) {
	globs := mcp.Globs(g.Include, g.Exclude)
	var keep, drop *celexpr.Filter
	var err error
	if g.Filter != "" {
		if keep, err = celexpr.NewFilter(g.Filter); err != nil {
			return nil, fmt.Errorf("filter: %w", err)
		}
	}
	if g.ExcludeWhen != "" {
		if drop, err = celexpr.NewFilter(g.ExcludeWhen); err != nil {
			return nil, fmt.Errorf("exclude_when: %w", err)
		}
	}
	// holds is expr on t; a tool on which it fails is left out, with a warning.
	holds := func(expr *celexpr.Filter, want bool, what string, t mcp.ToolInfo) bool {
		got, err := expr.Keep(celexpr.Tool{Name: t.Name, Description: t.Description, Annotations: t.Annotations})
		if err != nil {
			log.Warn("mcp tool left out: the group's "+what+" failed on it", "tool", t.Name, "error", err.Error())
			return false
		}
		return got == want
	}
	return func(t mcp.ToolInfo) bool {
		if !globs(t) {
			return false
		}
		if keep != nil && !holds(keep, true, "filter", t) {
			return false
		}
		if drop != nil && !holds(drop, false, "exclude_when", t) {
			return false
		}
		return code == nil || code(t)
	}, nil
}
