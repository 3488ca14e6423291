package celexpr

import (
	"strings"
	"testing"
)

func mustPolicy(t *testing.T, rules ...Rule) *Policy {
	t.Helper()
	p, err := NewPolicy(rules)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicyDecide(t *testing.T) {
	p := mustPolicy(t,
		Rule{When: `!("payments" in claims.?groups.orValue([]))`, Effect: Deny, Reason: "Only the payments team may charge."},
		Rule{When: `args.amount > 1000`, Effect: Approve, Reason: "Charges over 1000 need a second pair of eyes."},
		Rule{When: `tenant == "acme" && "charge:write" in scopes`, Effect: Allow},
		Rule{When: `true`, Effect: Deny, Reason: "No scope grants charges."},
	)
	payments := map[string]any{"groups": []any{"payments", "staff"}}
	for _, tc := range []struct {
		name string
		call Call
		want Decision
	}{
		{"not in the group", Call{Tool: "charge", Tenant: "acme", Args: map[string]any{"amount": 5.0}, Claims: map[string]any{"groups": []any{"staff"}}},
			Decision{Effect: Deny, Reason: "Only the payments team may charge.", Rule: 1}},
		{"no claims at all", Call{Tool: "charge", Args: map[string]any{"amount": 5.0}},
			Decision{Effect: Deny, Reason: "Only the payments team may charge.", Rule: 1}},
		{"large amount (an int in JSON compares with the double)", Call{Tool: "charge", Tenant: "acme", Args: map[string]any{"amount": 1500.0}, Claims: payments},
			Decision{Effect: Approve, Reason: "Charges over 1000 need a second pair of eyes.", Rule: 2}},
		{"allowed by scope", Call{Tool: "charge", Tenant: "acme", Args: map[string]any{"amount": 10.0}, Claims: payments, Scopes: []string{"charge:write"}},
			Decision{Effect: Allow, Rule: 3}},
		{"the last rule", Call{Tool: "charge", Tenant: "globex", Args: map[string]any{"amount": 10.0}, Claims: payments},
			Decision{Effect: Deny, Reason: "No scope grants charges.", Rule: 4}},
	} {
		got := p.Decide(tc.call)
		tc.want.Version = p.Version()
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestPolicyFailsClosed(t *testing.T) {
	p := mustPolicy(t, Rule{When: `args.amount > 10`, Effect: Approve})
	d := p.Decide(Call{Tool: "charge", Args: map[string]any{"currency": "EUR"}})
	if d.Effect != Deny || !d.Failed || d.Rule != 1 || !strings.Contains(d.Reason, "rule 1 of the policy could not be evaluated on this call") || !strings.Contains(d.Reason, "amount") {
		t.Errorf("a rule that fails on a call: %+v", d)
	}
	if d := mustPolicy(t).Decide(Call{Tool: "x"}); d.Effect != Allow || d.Rule != 0 {
		t.Errorf("no rules: %+v", d)
	}
	if d := p.Decide(Call{Tool: "charge", Args: map[string]any{"amount": 3}}); d.Effect != Allow || d.Rule != 0 {
		t.Errorf("no rule holds: %+v", d)
	}
}

func TestPolicyMayAllow(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules []Rule
		call  Call
		want  bool
	}{
		{"deny for this caller whatever the arguments", []Rule{{When: `caller != "alice"`, Effect: Deny}}, Call{Caller: "bob"}, false},
		{"the same rule, another caller", []Rule{{When: `caller != "alice"`, Effect: Deny}}, Call{Caller: "alice"}, true},
		{"deny only for some arguments", []Rule{{When: `caller == "bob" && args.amount > 10`, Effect: Deny}}, Call{Caller: "bob"}, true},
		{"approve for some arguments before a deny of everything", []Rule{{When: `args.amount < 10`, Effect: Approve}, {When: `true`, Effect: Deny}}, Call{}, true},
		{"an allow that cannot hold before a deny of everything", []Rule{{When: `tenant == "acme"`, Effect: Allow}, {When: `true`, Effect: Deny}}, Call{Tenant: "globex"}, false},
		{"a rule that fails whatever the arguments", []Rule{{When: `claims.role == "admin"`, Effect: Allow}}, Call{}, false},
		{"allowed first", []Rule{{When: `"ops" in scopes`, Effect: Allow}, {When: `true`, Effect: Deny}}, Call{Scopes: []string{"ops"}}, true},
	} {
		if got := mustPolicy(t, tc.rules...).MayAllow(tc.call); got != tc.want {
			t.Errorf("%s: MayAllow = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPolicyVersionAndRefusals(t *testing.T) {
	a := mustPolicy(t, Rule{When: `true`, Effect: Deny, Reason: "no"})
	b := mustPolicy(t, Rule{When: `true`, Effect: Deny, Reason: "no"})
	c := mustPolicy(t, Rule{When: `true`, Effect: Deny, Reason: "No."})
	if a.Version() != b.Version() || a.Version() == c.Version() || !strings.HasPrefix(a.Version(), "sha256:") {
		t.Errorf("versions: %s %s %s", a.Version(), b.Version(), c.Version())
	}
	for _, tc := range []struct {
		rule Rule
		want string
	}{
		{Rule{When: `true`, Effect: "block"}, `rule 1: effect must be allow, deny or approve, got "block"`},
		{Rule{Effect: Deny}, "rule 1: when is empty"},
		{Rule{When: `args.x +`, Effect: Deny}, "rule 1: invalid CEL expression"},
		{Rule{When: `tool`, Effect: Deny}, "yields string, not bool"},
		{Rule{When: `true`, Effect: Deny, Reason: strings.Repeat("x", MaxReasonBytes+1)}, "the reason is 1025 bytes"},
	} {
		if _, err := NewPolicy([]Rule{tc.rule}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.rule, err, tc.want)
		}
	}
}
