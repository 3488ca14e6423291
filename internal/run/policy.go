package run

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/toolmesh/toolmesh/internal/celexpr"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// LayerPolicy is the name of the call-policy layer of the call pipeline.
const LayerPolicy = "policy"

// policyRecord is a call policy's decision as the run's journal keeps it: recorded before
// the call goes on, so that a resumed run decides its calls as it did, whatever the
// config says by then.
type policyRecord struct {
	Key  string `json:"key"`
	Tool string `json:"tool"`
	celexpr.Decision
}

// policyOf is the compiled call policy of tool name of group role (the tool's rules, then
// the group's), or nil when it has none. The config was checked at start; rules that
// still do not compile (a tool's and its group's together past the limit) deny every
// call, saying why.
func (s *Service) policyOf(role, name string) *celexpr.Policy {
	key := role + "\x00" + name
	if p, ok := s.policies.Load(key); ok {
		return p.(*celexpr.Policy)
	}
	rules := s.cfg.PolicyOf(role, name)
	if len(rules) == 0 {
		return nil
	}
	p, err := celexpr.NewPolicy(rules)
	if err != nil {
		if s.log != nil {
			s.log.Error("a tool's call policy does not compile: its calls are denied", "tool", name, "group", role, "error", err.Error())
		}
		p, _ = celexpr.NewPolicy([]celexpr.Rule{{When: "true", Effect: celexpr.Deny,
			Reason: "The tool's call policy is misconfigured; tell the operator."}})
	}
	actual, _ := s.policies.LoadOrStore(key, p)
	return actual.(*celexpr.Policy)
}

// policyLayer decides each call of a tool that has a call policy, before it goes on: a
// denial is the result the model reads; approve makes the call wait for a person's
// approval (unless the tool's calls wait for it anyway). Each decision is journaled with
// the call and the policy's version.
func (s *Service) policyLayer(tenant string, caller Caller) toolcall.Layer {
	return toolcall.Layer{Name: LayerPolicy, For: func(t tool.Tool) func(toolcall.Handler) toolcall.Handler {
		role, _ := groupOf(t)
		name := t.Definition().Name
		pol := s.policyOf(role, name)
		if pol.Empty() {
			return nil
		}
		approvedAnyway, timeout := s.approvalOf(t)
		base := policyCall(tenant, caller)
		base.Tool, base.Group = name, role
		return func(next toolcall.Handler) toolcall.Handler {
			return func(ctx context.Context, c *toolcall.Call) (tool.Result, error) {
				call := base
				call.Args = argsOf(c.Input)
				d, err := decided(ctx, pol, name, call, s.log)
				if err != nil {
					return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' did not run: recording its call policy's decision failed: %v", name, err)), nil
				}
				switch d.Effect {
				case celexpr.Deny:
					return tool.ErrorWithCode(tool.CodeFailed, deniedByPolicy(name, d)), nil
				case celexpr.Approve:
					if !approvedAnyway {
						if res, refused := approve(ctx, name, c.Input, timeout); refused {
							return res, nil
						}
					}
				}
				return next(ctx, c)
			}
		}
	}}
}

// deniedByPolicy is what the model reads of a call the policy denied.
func deniedByPolicy(name string, d celexpr.Decision) string {
	msg := fmt.Sprintf("The call of tool '%s' was denied by policy, so it did not run.", name)
	if r := strings.TrimSpace(d.Reason); r != "" {
		if d.Failed {
			return msg + " " + strings.ToUpper(r[:1]) + r[1:] + "."
		}
		if !strings.ContainsAny(r[len(r)-1:], ".!?") {
			r += "."
		}
		msg += " Reason: " + r
	}
	return msg + " Do not call it again with the same arguments."
}

// decided is the policy's decision on call: the one the run recorded before, when it
// replays the call; else a new one, recorded in the run's journal before the call goes on.
func decided(ctx context.Context, pol *celexpr.Policy, name string, call celexpr.Call, log *slog.Logger) (celexpr.Decision, error) {
	ap, _ := ctx.Value(approverKey{}).(*approver)
	var j *journal
	if ap != nil {
		j = ap.j
	}
	info, _ := tool.CallInfoFrom(ctx)
	key := callKey(info)
	if j != nil {
		if p, ok := j.policy(key); ok {
			return p.Decision, nil
		}
	}
	d := pol.Decide(call)
	if d.Effect != celexpr.Allow && log != nil {
		log.Info("a call policy decided a call", "tool", name, "group", call.Group, "tenant", call.Tenant,
			"caller", call.Caller, "effect", string(d.Effect), "rule", d.Rule, "version", d.Version)
	}
	if j != nil {
		data, _ := toolinternal.MarshalJSON(policyRecord{Key: key, Tool: name, Decision: d})
		if _, err := j.add(runlog.KindPolicy, data, nil, false); err != nil {
			return celexpr.Decision{}, err
		}
	}
	return d, nil
}

// policyCall is what a policy sees of the caller of a run.
func policyCall(tenant string, caller Caller) celexpr.Call {
	c := celexpr.Call{Tenant: tenant, Caller: caller.ID, Scopes: caller.Scopes}
	if len(caller.Claims) > 0 {
		_ = json.Unmarshal(caller.Claims, &c.Claims)
	}
	return c
}

// argsOf is a call's arguments as a policy reads them: the JSON object, or none.
func argsOf(input string) map[string]any {
	var args map[string]any
	if err := json.Unmarshal([]byte(input), &args); err != nil {
		return map[string]any{}
	}
	return args
}

// MayCall reports whether the tool name of group role may be called at all by this
// caller under its call policy, whatever the arguments: listings show only such tools.
func (s *Service) MayCall(role, name, tenant string, caller Caller) bool {
	pol := s.policyOf(role, name)
	if pol.Empty() {
		return true
	}
	c := policyCall(tenant, caller)
	c.Tool, c.Group = name, role
	return pol.MayAllow(c)
}

// Allows reports whether the call of t with input (its arguments, JSON) by this caller
// would go on under t's call policy: allowed, or waiting for approval; not denied.
func (s *Service) Allows(t tool.Tool, input, tenant string, caller Caller) bool {
	role, _ := groupOf(t)
	name := t.Definition().Name
	pol := s.policyOf(role, name)
	if pol.Empty() {
		return true
	}
	c := policyCall(tenant, caller)
	c.Tool, c.Group, c.Args = name, role, argsOf(input)
	return pol.Decide(c).Effect != celexpr.Deny
}

// orNil is c for the request record, nil when nothing is known of the caller.
func (c Caller) orNil() *Caller {
	if c.ID == "" && len(c.Scopes) == 0 && len(c.Claims) == 0 {
		return nil
	}
	return &c
}

// PolicyView is how a caller outside a run (the MCP endpoint's session) sees tools under
// their call policies: a tool its policy denies to this caller whatever the arguments is
// not offered (nil); each call of another is decided as a run's is (approve finds nobody
// to approve outside a run, and the call does not run).
func (s *Service) PolicyView(tenant string, caller Caller) func(tool.Tool) tool.Tool {
	p := toolcall.Pipeline{s.policyLayer(tenant, caller)}
	return func(t tool.Tool) tool.Tool {
		role, _ := groupOf(t)
		if !s.MayCall(role, t.Definition().Name, tenant, caller) {
			return nil
		}
		return p.Wrap(t)
	}
}
