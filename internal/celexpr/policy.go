package celexpr

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
)

// Effect is what a call policy's rule does with a call it matches.
type Effect string

// The effects of a rule.
const (
	// Allow lets the call go on; later rules are not read.
	Allow Effect = "allow"
	// Deny refuses the call: it does not run, and the model reads the rule's reason.
	Deny Effect = "deny"
	// Approve makes the call wait for a person's approval before it runs.
	Approve Effect = "approve"
)

// MaxRules bounds the rules of one tool's policy (its own and its group's together), and
// MaxReasonBytes a rule's reason.
const (
	MaxRules       = 64
	MaxReasonBytes = 1 << 10
)

// Rule is one rule of a call policy as the config writes it: when When (a bool over the
// call) holds, Effect applies, with Reason (what the model reads of a denial, what the
// approver reads of an approval).
type Rule struct {
	When   string `json:"when"`
	Effect Effect `json:"effect"`
	Reason string `json:"reason,omitempty"`
}

// Call is what a policy sees of a call: `tool` and `group`, `args` (the validated
// arguments), `tenant`, `caller` (who the verified caller is: a SPIFFE ID or the token's
// issuer#subject), `claims` (its bearer token's claims; empty for a certificate) and
// `scopes` (its token's scopes).
type Call struct {
	Tool, Group, Tenant, Caller string
	Args                        map[string]any
	Claims                      map[string]any
	Scopes                      []string
}

// Decision is a policy's answer for one call: the effect, the reason of the rule that
// matched, which rule (1-based, in the order the policy lists them; 0 when none matched
// and the call is allowed by default) and the policy's version.
type Decision struct {
	Effect  Effect `json:"effect"`
	Reason  string `json:"reason,omitempty"`
	Rule    int    `json:"rule,omitempty"`
	Version string `json:"version"`
	// Failed says that a rule could not be evaluated on the call (it read an argument
	// the call lacks, say): the policy then denies, and Reason says why.
	Failed bool `json:"failed,omitempty"`
}

// Policy is a compiled call policy: rules read in order, the first that holds decides; a
// call no rule holds for is allowed. A rule that fails on a call denies it: a policy
// never lets through what it could not decide.
type Policy struct {
	rules   []compiledRule
	version string
}

type compiledRule struct {
	Rule
	prg, partial cel.Program
}

// policyEnv is the environment of policy rules.
func policyEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.OptionalTypes(),
		cel.CrossTypeNumericComparisons(true),
		cel.Variable("tool", cel.StringType),
		cel.Variable("group", cel.StringType),
		cel.Variable("tenant", cel.StringType),
		cel.Variable("caller", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("claims", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("scopes", cel.ListType(cel.StringType)),
	)
}

// NewPolicy compiles rules. Its version is a digest of the rules, so that the same rules
// always have the same version and a changed rule a new one.
func NewPolicy(rules []Rule) (*Policy, error) {
	if len(rules) > MaxRules {
		return nil, fmt.Errorf("%d rules; the limit is %d", len(rules), MaxRules)
	}
	env, err := policyEnv()
	if err != nil {
		return nil, err
	}
	p := &Policy{}
	for i, r := range rules {
		switch r.Effect {
		case Allow, Deny, Approve:
		default:
			return nil, fmt.Errorf("rule %d: effect must be allow, deny or approve, got %q", i+1, r.Effect)
		}
		if len(r.Reason) > MaxReasonBytes {
			return nil, fmt.Errorf("rule %d: the reason is %d bytes; the limit is %d", i+1, len(r.Reason), MaxReasonBytes)
		}
		if r.When == "" {
			return nil, fmt.Errorf("rule %d: when is empty (write true for a rule that always holds)", i+1)
		}
		if len(r.When) > MaxBytes {
			return nil, fmt.Errorf("rule %d: the expression is %d bytes; the limit is %d", i+1, len(r.When), MaxBytes)
		}
		ast, iss := env.Compile(r.When)
		if iss.Err() != nil {
			return nil, fmt.Errorf("rule %d: invalid CEL expression %q: %w", i+1, r.When, iss.Err())
		}
		if out := ast.OutputType(); !out.IsExactType(cel.BoolType) && !out.IsExactType(cel.DynType) {
			return nil, fmt.Errorf("rule %d: the CEL expression %q yields %s, not bool", i+1, r.When, out)
		}
		prg, err := env.Program(ast, cel.CostLimit(cost), cel.EvalOptions(cel.OptTrackCost))
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", i+1, err)
		}
		partial, err := env.Program(ast, cel.CostLimit(cost), cel.EvalOptions(cel.OptTrackState, cel.OptPartialEval))
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", i+1, err)
		}
		p.rules = append(p.rules, compiledRule{Rule: r, prg: prg, partial: partial})
	}
	canon, _ := json.Marshal(rules)
	sum := sha256.Sum256(canon)
	p.version = "sha256:" + hex.EncodeToString(sum[:6])
	return p, nil
}

// Version is the policy's version: a digest of its rules.
func (p *Policy) Version() string { return p.version }

// Empty reports whether the policy has no rules (it allows every call).
func (p *Policy) Empty() bool { return p == nil || len(p.rules) == 0 }

// vars are c as a rule reads it.
func (c Call) vars() map[string]any {
	args, claims, scopes := c.Args, c.Claims, c.Scopes
	if args == nil {
		args = map[string]any{}
	}
	if claims == nil {
		claims = map[string]any{}
	}
	if scopes == nil {
		scopes = []string{}
	}
	return map[string]any{"tool": c.Tool, "group": c.Group, "tenant": c.Tenant, "caller": c.Caller,
		"args": args, "claims": claims, "scopes": scopes}
}

// Decide is the policy's decision on c.
func (p *Policy) Decide(c Call) Decision {
	if p.Empty() {
		return Decision{Effect: Allow}
	}
	vars := c.vars()
	b := &budget{left: callCost}
	for i, r := range p.rules {
		out, err := b.eval(r.prg, vars)
		if err == nil {
			if _, ok := out.Value().(bool); !ok {
				err = fmt.Errorf("it yields %v, not a bool", out.Value())
			}
		}
		if err != nil {
			return Decision{Effect: Deny, Rule: i + 1, Version: p.version, Failed: true,
				Reason: fmt.Sprintf("rule %d of the policy could not be evaluated on this call (%v)", i+1, err)}
		}
		if out == types.True {
			return Decision{Effect: r.Effect, Reason: r.Reason, Rule: i + 1, Version: p.version}
		}
	}
	return Decision{Effect: Allow, Version: p.version}
}

// MayAllow reports whether some call of the tool by this caller may be allowed (or
// approved), whatever its arguments: c without Args, which the rules see as unknown. It
// is false only when a rule that denies holds for every call, before any rule that could
// let one through: such a tool is not listed to the caller.
func (p *Policy) MayAllow(c Call) bool {
	if p.Empty() {
		return true
	}
	vars, err := cel.PartialVars(c.vars(), cel.AttributePattern("args"))
	if err != nil {
		return true
	}
	for _, r := range p.rules {
		out, _, err := r.partial.Eval(vars)
		switch {
		case out != nil && types.IsUnknown(out):
			// Holds for some arguments only: a call that it holds for gets its effect,
			// another goes on to the next rule.
			if r.Effect != Deny {
				return true
			}
		case err != nil:
			return false // fails whatever the arguments: every call is denied
		case out == types.True:
			return r.Effect != Deny
		}
	}
	return true
}
