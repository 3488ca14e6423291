package celexpr

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/ctxconv"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

func TestConverter(t *testing.T) {
	in := toolctx.MustOf("tenant_id", "acme", "x-correlation-id", "c-1", "debug", "on", "user_id", "u-7", "authToken", "s3cr3t", toolctx.LoopIDKey, "loop-1")
	hidden := func(k string) bool { return ctxconv.IsSecretKey(k, "authToken") }
	tests := []struct {
		name string
		keep string
		set  map[string]string
		want map[string]string
	}{
		{"keep by key", `key.startsWith("x-") || key == "tenant_id"`, nil,
			map[string]string{"tenant_id": "acme", "x-correlation-id": "c-1"}},
		{"keep by value", `value == "on"`, nil, map[string]string{"debug": "on"}},
		{"set over everything kept", ``, map[string]string{"caller": `context.?user_id.orValue("anonymous")`, "where": `group`},
			map[string]string{"tenant_id": "acme", "x-correlation-id": "c-1", "debug": "on", "user_id": "u-7", "caller": "u-7", "where": "billing"}},
		{"a missing key read with ? has its default", `false`, map[string]string{"who": `context.?nobody.orValue("anonymous")`},
			map[string]string{"who": "anonymous"}},
		{"a missing key read without ? leaves its entry out", `key == "debug"`, map[string]string{"who": `context.nobody`, "debug": `context.nobody`},
			map[string]string{}},
		{"a secret is out of sight", `true`, map[string]string{"copied": `context.?authToken.orValue("none")`},
			map[string]string{"tenant_id": "acme", "x-correlation-id": "c-1", "debug": "on", "user_id": "u-7", "copied": "none"}},
		{"the group is known", `group == "billing" && key == "debug"`, nil, map[string]string{"debug": "on"}},
	}
	for _, tt := range tests {
		c, err := NewConverter("billing", tt.keep, tt.set, hidden)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if diff := cmp.Diff(tt.want, c.Convert(in).Map()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestConverterNow: now is the time of the call, so a converter can stamp a request as
// the source's function converters do.
func TestConverterNow(t *testing.T) {
	c, err := NewConverter("g", `false`, map[string]string{"requestedAt": `string(now)`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().UTC().Add(-time.Second)
	got, _ := c.Convert(toolctx.MustOf("a", "b")).Get("requestedAt")
	at, err := time.Parse(time.RFC3339Nano, got)
	if err != nil || at.Before(before) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("requestedAt = %q (%v): not the time of the call", got, err)
	}
}

func TestConverterRefusedAtCompile(t *testing.T) {
	tests := []struct {
		keep string
		set  map[string]string
		want string
	}{
		{``, nil, "needs keep, set or both"},
		{`key + "x"`, nil, "yields string, not bool"},
		{`true`, map[string]string{"n": `1 + 2`}, "yields int, not string"},
		{`nope(`, nil, "invalid CEL expression"},
		{`unknown_var`, nil, "undeclared reference"},
		{`true`, map[string]string{"toolmesh.loop_id": `"x"`}, "reserved"},
		{strings.Repeat("a", MaxBytes+1), nil, "the limit is 4096"},
	}
	for _, tt := range tests {
		if _, err := NewConverter("g", tt.keep, tt.set, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewConverter(%q, %v) = %v, want an error saying %q", tt.keep, tt.set, err, tt.want)
		}
	}
}

// TestConverterNeverForwardsReserved: a keep that says yes to everything still drops the
// engine's own keys.
func TestConverterNeverForwardsReserved(t *testing.T) {
	c, err := NewConverter("g", `true`, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Convert(toolctx.MustOf("a", "1", toolctx.LoopIDKey, "l")).Map(); !cmp.Equal(got, map[string]string{"a": "1"}) {
		t.Errorf("Convert = %v", got)
	}
}

func TestFilter(t *testing.T) {
	tools := []Tool{
		{Name: "echo", Description: "Echoes its text.", Annotations: map[string]any{"read_only": true, "destructive": false}},
		{Name: "delete_all", Description: "Deletes everything.", Annotations: map[string]any{"read_only": false, "destructive": true}},
		{Name: "plain", Description: "No hints."},
	}
	tests := []struct {
		src  string
		want []string
	}{
		{`name.startsWith("e")`, []string{"echo"}},
		{`!annotations.?destructive.orValue(true)`, []string{"echo"}},
		{`annotations.?read_only.orValue(false) || description.contains("hints")`, []string{"echo", "plain"}},
	}
	for _, tt := range tests {
		f, err := NewFilter(tt.src)
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		var got []string
		for _, tl := range tools {
			if ok, err := f.Keep(tl); err != nil {
				t.Errorf("%s on %s: %v", tt.src, tl.Name, err)
			} else if ok {
				got = append(got, tl.Name)
			}
		}
		if !cmp.Equal(got, tt.want) {
			t.Errorf("%s kept %v, want %v", tt.src, got, tt.want)
		}
	}
	// A filter that reads a hint the server did not give fails on that tool.
	f, err := NewFilter(`annotations.destructive == false`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := f.Keep(tools[2]); ok || err == nil {
		t.Errorf("Keep(plain) = %v, %v; want an error", ok, err)
	}
	if _, err := NewFilter(`name`); err == nil || !strings.Contains(err.Error(), "not bool") {
		t.Errorf("NewFilter(name) = %v", err)
	}
}

// TestConverterCostIsBoundedPerCall: a keep that walks the whole context for every entry
// costs the square of the context's size; one conversion stops at its cost limit instead
// (the entries past it are left out), however many entries there are.
func TestConverterCostIsBoundedPerCall(t *testing.T) {
	c, err := NewConverter("g", `context.exists(k, k == key + "x")`, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	kv := make([]string, 0, 2*3000)
	for i := range 3000 {
		kv = append(kv, fmt.Sprintf("k%04d", i), "v")
	}
	if out := c.Convert(toolctx.MustOf(kv...)); out.Len() != 0 {
		t.Errorf("kept %d entries, none of which keep accepts", out.Len())
	}
	b := &budget{left: callCost}
	vars := map[string]any{"context": toolctx.MustOf(kv...).Map(), "group": "g", "now": time.Now(), "key": "k0001", "value": "v"}
	spent := 0
	for b.left > 0 {
		if _, err := b.eval(c.keep, vars); err != nil {
			break
		}
		spent++
	}
	if spent == 0 || spent >= 3000 {
		t.Errorf("%d evaluations before the limit: the budget does not bind", spent)
	}
}
