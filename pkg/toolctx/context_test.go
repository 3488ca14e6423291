package toolctx_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

func TestOf(t *testing.T) {
	c, err := toolctx.Of("tenantId", "acme", "authToken", "xyz", "tenantId", "later")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"tenantId": "later", "authToken": "xyz"}
	if diff := cmp.Diff(want, c.Map()); diff != "" {
		t.Errorf("Of: later pair should win (-want +got):\n%s", diff)
	}

	if _, err := toolctx.Of("k"); err == nil {
		t.Error("Of with an odd number of arguments: want error")
	}
	empty, err := toolctx.Of()
	if err != nil || !empty.IsEmpty() || !empty.Equal(toolctx.Empty) {
		t.Errorf("Of() = %v, %v; want Empty", empty, err)
	}
	if diff := cmp.Diff(toolctx.Empty, empty); diff != "" {
		t.Errorf("Of() differs from Empty:\n%s", diff)
	}
}

func TestMustOfPanicsOnOddCount(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("MustOf(\"k\") did not panic")
		}
	}()
	toolctx.MustOf("k")
}

func TestZeroValueIsEmpty(t *testing.T) {
	var c toolctx.Context
	if !c.IsEmpty() || c.Len() != 0 || !c.Equal(toolctx.Empty) {
		t.Errorf("zero Context = %v, want Empty", c)
	}
	if _, ok := c.Get("x"); ok {
		t.Error("Get on the zero Context found a key")
	}
	if got := c.Map(); got == nil || len(got) != 0 {
		t.Errorf("Map() = %#v, want an empty non-nil map", got)
	}
	if got := c.String(); got != "ToolCallContext({})" {
		t.Errorf("String() = %q", got)
	}
}

func TestFromMapCopies(t *testing.T) {
	m := map[string]string{"a": "1"}
	c := toolctx.FromMap(m)
	m["a"] = "changed"
	m["b"] = "2"
	if got, _ := c.Get("a"); got != "1" || c.Len() != 1 {
		t.Errorf("context changed with its source map: %v", c)
	}
	if !toolctx.FromMap(nil).Equal(toolctx.Empty) || !toolctx.FromMap(map[string]string{}).IsEmpty() {
		t.Error("FromMap of nothing is not Empty")
	}
}

func TestMapIsDefensiveCopy(t *testing.T) {
	c := toolctx.MustOf("a", "1")
	m := c.Map()
	m["a"] = "changed"
	m["b"] = "2"
	if diff := cmp.Diff(toolctx.MustOf("a", "1"), c); diff != "" {
		t.Errorf("changing Map() changed the context:\n%s", diff)
	}
}

func TestAccessors(t *testing.T) {
	c := toolctx.MustOf("b", "2", "a", "1", "empty", "")
	if v, ok := c.Get("a"); !ok || v != "1" {
		t.Errorf("Get(a) = %q, %v", v, ok)
	}
	if v, ok := c.Get("missing"); ok || v != "" {
		t.Errorf("Get(missing) = %q, %v", v, ok)
	}
	if v, ok := c.Get("empty"); !ok || v != "" {
		t.Errorf("Get(empty) = %q, %v; an empty value is present", v, ok)
	}
	if got := c.GetOr("missing", "def"); got != "def" {
		t.Errorf("GetOr(missing) = %q", got)
	}
	if got := c.GetOr("empty", "def"); got != "" {
		t.Errorf("GetOr(empty) = %q, want the present empty value", got)
	}
	if !c.Contains("a") || c.Contains("missing") {
		t.Error("Contains is wrong")
	}
	if c.Len() != 3 || c.IsEmpty() {
		t.Errorf("Len = %d, IsEmpty = %v", c.Len(), c.IsEmpty())
	}
	if diff := cmp.Diff([]string{"a", "b", "empty"}, c.Keys()); diff != "" {
		t.Errorf("Keys not sorted (-want +got):\n%s", diff)
	}
	var keys []string
	for k, v := range c.All() {
		keys = append(keys, k+"="+v)
		if k == "b" {
			break
		}
	}
	if diff := cmp.Diff([]string{"a=1", "b=2"}, keys); diff != "" {
		t.Errorf("All with early stop (-want +got):\n%s", diff)
	}
}

func TestMerge(t *testing.T) {
	x := toolctx.MustOf("a", "1", "b", "2")
	y := toolctx.MustOf("b", "override", "c", "3")
	if diff := cmp.Diff(toolctx.MustOf("a", "1", "b", "override", "c", "3"), x.Merge(y)); diff != "" {
		t.Errorf("x.Merge(y): other should win (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(toolctx.MustOf("a", "1", "b", "2"), x); diff != "" {
		t.Errorf("Merge changed its receiver:\n%s", diff)
	}
	if !x.Merge(toolctx.Empty).Equal(x) || !toolctx.Empty.Merge(y).Equal(y) {
		t.Error("merging with Empty is not the identity")
	}
}

// TestEffectiveMergeTable pins every row of the merge table of the two levels: the
// interaction level wins over the run level.
func TestEffectiveMergeTable(t *testing.T) {
	tests := []struct {
		name             string
		run, interaction toolctx.Context
		want             toolctx.Context
	}{
		{"run only", toolctx.MustOf("tenantId", "acme"), toolctx.Empty, toolctx.MustOf("tenantId", "acme")},
		{"interaction only", toolctx.Empty, toolctx.MustOf("authToken", "xyz"), toolctx.MustOf("authToken", "xyz")},
		{"disjoint keys are unioned", toolctx.MustOf("tenantId", "acme"), toolctx.MustOf("authToken", "xyz"),
			toolctx.MustOf("tenantId", "acme", "authToken", "xyz")},
		{"interaction wins", toolctx.MustOf("tenantId", "acme"), toolctx.MustOf("tenantId", "override"),
			toolctx.MustOf("tenantId", "override")},
		{"both empty", toolctx.Empty, toolctx.Empty, toolctx.Empty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.run.Merge(tt.interaction)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%v.Merge(%v) (-want +got):\n%s", tt.run, tt.interaction, diff)
			}
		})
	}
	if got := toolctx.MustOf("tenantId", "acme").Merge(toolctx.MustOf("tenantId", "override")).String(); got != "ToolCallContext({tenantId=override})" {
		t.Errorf("String of the winning row = %q", got)
	}
}

func TestWithAndWithout(t *testing.T) {
	c := toolctx.MustOf("a", "1")
	d := c.With("b", "2").With("a", "changed")
	if diff := cmp.Diff(toolctx.MustOf("a", "changed", "b", "2"), d); diff != "" {
		t.Errorf("With (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(toolctx.MustOf("a", "1"), c); diff != "" {
		t.Errorf("With changed its receiver:\n%s", diff)
	}
	if diff := cmp.Diff(toolctx.MustOf("b", "2"), d.Without("a", "missing")); diff != "" {
		t.Errorf("Without (-want +got):\n%s", diff)
	}
	if !d.Without("missing").Equal(d) {
		t.Error("Without of an absent key changed the context")
	}
	if got := d.Without("a", "b"); !got.IsEmpty() {
		t.Errorf("Without every key = %v, want Empty", got)
	}
	if diff := cmp.Diff(toolctx.MustOf("a", "changed", "b", "2"), d); diff != "" {
		t.Errorf("Without changed its receiver:\n%s", diff)
	}
}

func TestEqualAndString(t *testing.T) {
	a := toolctx.MustOf("k2", "v2", "k1", "v1")
	b := toolctx.FromMap(map[string]string{"k1": "v1", "k2": "v2"})
	if !a.Equal(b) {
		t.Error("contexts with the same entries are not equal")
	}
	if a.Equal(a.With("k1", "other")) || a.Equal(a.With("k3", "v3")) {
		t.Error("contexts with different entries are equal")
	}
	if got, want := a.String(), "ToolCallContext({k1=v1, k2=v2})"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestLoopID(t *testing.T) {
	if toolctx.LoopIDKey != "toolmesh.loop_id" || toolctx.ReservedPrefix != "toolmesh." {
		t.Fatalf("reserved keys changed: %q %q", toolctx.LoopIDKey, toolctx.ReservedPrefix)
	}
	c := toolctx.MustOf("tenantId", "acme")
	if c.LoopID() != "" {
		t.Errorf("LoopID of a context without one = %q", c.LoopID())
	}
	// The loop id is the call's: FromContext shows it, whatever the bag given held.
	ctx := toolcall.WithCallInfo(context.Background(), tool.CallInfo{LoopID: "loop-1"})
	forged := c.With(toolctx.LoopIDKey, "forged").With("toolmesh.other", "x")
	l := toolctx.FromContext(toolctx.NewContext(ctx, forged))
	if l.LoopID() != "loop-1" || l.GetOr(toolctx.LoopIDKey, "") != "loop-1" || !l.Without(toolctx.LoopIDKey).Equal(c) {
		t.Errorf("FromContext in loop-1 = %v, want %v plus the loop id", l, c)
	}
	if l := toolctx.FromContext(toolctx.NewContext(context.Background(), forged)); !l.Equal(c) {
		t.Errorf("FromContext outside a loop = %v, want %v: reserved keys are toolmesh's", l, c)
	}
	if l := toolctx.FromContext(ctx); !l.Equal(toolctx.MustOf(toolctx.LoopIDKey, "loop-1")) {
		t.Errorf("FromContext without a bag = %v, want the loop id alone", l)
	}
	// What crosses to a worker: the bag without the loop id (it has a field of its own)
	// or any other reserved key, in loop-1 or not.
	if got := toolcall.Carried(toolctx.NewContext(ctx, forged)); !got.Equal(c) {
		t.Errorf("Carried in loop-1 = %v, want %v", got, c)
	}
	if got := toolcall.Carried(ctx); !got.IsEmpty() {
		t.Errorf("Carried without a bag = %v, want it empty", got)
	}
	if !toolctx.IsReserved(toolctx.LoopIDKey) || toolctx.IsReserved("toolmesh") || toolctx.IsReserved("tenantId") {
		t.Error("IsReserved is wrong")
	}
	if diff := cmp.Diff(c, l.With("toolmesh.other", "x").WithoutReserved()); diff != "" {
		t.Errorf("WithoutReserved (-want +got):\n%s", diff)
	}
}

func TestGoContextPlumbing(t *testing.T) {
	if got := toolctx.FromContext(context.Background()); !got.Equal(toolctx.Empty) {
		t.Errorf("FromContext without a bag = %v, want Empty", got)
	}
	c := toolctx.MustOf("tenantId", "acme")
	ctx := toolctx.NewContext(context.Background(), c)
	if diff := cmp.Diff(c, toolctx.FromContext(ctx)); diff != "" {
		t.Errorf("FromContext(NewContext(c)) (-want +got):\n%s", diff)
	}
	inner := toolctx.NewContext(ctx, toolctx.MustOf("other", "x"))
	if got := toolctx.FromContext(inner); got.Contains("tenantId") {
		t.Errorf("NewContext replaces, it does not merge: %v", got)
	}
}

func TestContextIsImmutableUnderConcurrentReads(t *testing.T) {
	c := toolctx.MustOf("a", "1", "b", "2")
	want := slices.Collect(maps.Keys(c.Map()))
	slices.Sort(want)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_ = c.With("x", "y").Merge(c).Without("a").String()
				if !slices.Equal(c.Keys(), want) {
					t.Error("keys changed")
				}
			}
		})
	}
	wg.Wait()
}
