package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestToolChainingAcrossReplicas: profile, a method of users.User, first answers that it
// needs a user; find_user returns one, which binds; updateEmail, served by the other
// replica (the finder's is killed first), gets the bound user as its receiver and
// returns the changed user, which replaces the binding; profile then reads the new
// email, on the remaining replica.
func TestToolChainingAcrossReplicas(t *testing.T) {
	var m *mesh
	// The replica that served find_user, as the client's event says: the model's next
	// turn may come before the client has read that event, so it waits for it.
	finder := make(chan string, 1)
	model := &turnModel{turns: []modelTurn{
		{calls: [][2]string{{"profile", `{}`}}},
		{calls: [][2]string{{"find_user", `{"name":"ada"}`}}},
		{calls: [][2]string{{"updateEmail", `{"email":"ada@analytical.engine"}`}}, before: func() {
			select {
			case id := <-finder:
				_ = m.workers[id].Kill()
			case <-time.After(20 * time.Second):
				t.Error("the client never saw find_user finish")
			}
		}},
		{calls: [][2]string{{"profile", `{}`}}},
		{text: "done"},
	}}
	useModel(t, model)
	m = startMesh(t, "", "provider: {name: openai}\n")
	m.startWorker("users-1", "users")
	m.startWorker("users-2", "users")
	m.waitWorkers("users-1", "users-2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "Change Ada's email.", ToolGroups: []string{"users"}}, func(ev *toolpb.RunResponse) {
		if f := ev.GetToolCallFinished(); f != nil && f.GetTool() == "find_user" {
			finder <- f.GetWorkerId()
		}
	})
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if got := finalText(t, evs); got != "done" {
		t.Errorf("final %q", got)
	}
	calls := finished(evs, 0)
	if len(calls) != 4 {
		t.Fatalf("calls %v", calls)
	}
	want := []string{
		"This tool is not yet available. You must first retrieve a single User instance.",
		"Found user 1: Ada Lovelace <ada@example.com>",
		"The email of Ada Lovelace changed from ada@example.com to ada@analytical.engine",
		"Ada Lovelace (id 1) <ada@analytical.engine>",
	}
	for i, c := range calls {
		if c.GetContent() != want[i] {
			t.Errorf("call %d (%s): %q, want %q", i, c.GetTool(), c.GetContent(), want[i])
		}
	}
	if calls[0].GetWorkerId() != "" {
		t.Errorf("the unbound method reached worker %s", calls[0].GetWorkerId())
	}
	if found := calls[1].GetWorkerId(); calls[2].GetWorkerId() == found || calls[2].GetWorkerId() == "" || calls[3].GetWorkerId() != calls[2].GetWorkerId() {
		t.Errorf("finder %s, updateEmail on %q, profile on %q", found, calls[2].GetWorkerId(), calls[3].GetWorkerId())
	}
	// The model is offered the methods from the start, with their real schemas and the
	// note that they need a user.
	if offered := model.offered(); len(offered) == 0 || strings.Join(offered[0], ",") != "find_user,profile,updateEmail" {
		t.Errorf("offered %v", offered)
	}
}
