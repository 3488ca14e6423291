package main

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestGroupNames: -groups accepts every example group, library among them, and names
// them all when it is given one it does not know.
func TestGroupNames(t *testing.T) {
	want := []string{"crm", "database", "faults", "handbook", "library", "math", "payments", "shop", "text", "users"}
	if diff := cmp.Diff(want, groupNames()); diff != "" {
		t.Errorf("group names (-want +got):\n%s", diff)
	}
	gs, err := buildGroups("math, library", time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, g := range gs {
		roles = append(roles, g.Role)
	}
	if !slices.Equal(roles, []string{"math", "library"}) {
		t.Errorf("-groups 'math, library' serves %v", roles)
	}
	_, err = buildGroups("libraries", 0, nil)
	if err == nil || err.Error() != `-groups: unknown group "libraries" (available: crm, database, faults, handbook, library, math, payments, shop, text, users, echo_<name>)` {
		t.Errorf("an unknown group: %v", err)
	}
}
