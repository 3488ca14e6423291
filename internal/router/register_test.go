package router

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

func TestRegisterRejectsMalformedRegistrations(t *testing.T) {
	valid := func() *toolpb.Registration {
		return registration("w1", "127.0.0.1:9000", "text", echoTool("echo"))
	}
	firstTool := func(reg *toolpb.Registration) *toolpb.RegisteredTool { return reg.Groups[0].Tools[0] }
	tests := []struct {
		name   string
		mutate func(*toolpb.Registration)
		// want is a fragment of the reason; group and tool are the fields the rejection
		// must point at.
		want        string
		group, tool string
	}{
		{"empty worker id", func(r *toolpb.Registration) { r.WorkerId = "" }, "worker_id", "", ""},
		{"blank worker id", func(r *toolpb.Registration) { r.WorkerId = "  " }, "worker_id", "", ""},
		{"empty address", func(r *toolpb.Registration) { r.Address = "" }, "address", "", ""},
		{"address without port", func(r *toolpb.Registration) { r.Address = "localhost" }, "address", "", ""},
		{"address without host", func(r *toolpb.Registration) { r.Address = ":9000" }, "address", "", ""},
		{"address with port zero", func(r *toolpb.Registration) { r.Address = "127.0.0.1:0" }, "address", "", ""},
		{"address with port out of range", func(r *toolpb.Registration) { r.Address = "127.0.0.1:70000" }, "address", "", ""},
		{"address with named port", func(r *toolpb.Registration) { r.Address = "127.0.0.1:http" }, "address", "", ""},
		{"negative capacity", func(r *toolpb.Registration) { r.Capacity = -1 }, "capacity", "", ""},
		{"no groups", func(r *toolpb.Registration) { r.Groups = nil }, "no tool groups", "", ""},
		{"group without info", func(r *toolpb.Registration) { r.Groups[0].Group = nil }, "group role", "", ""},
		{"bad group role", func(r *toolpb.Registration) { r.Groups[0].Group.Role = "has space" }, "group role", "has space", ""},
		{"group twice", func(r *toolpb.Registration) {
			r.Groups = append(r.Groups, registration("w1", "127.0.0.1:9000", "text", echoTool("other")).Groups[0])
		}, "registered twice", "text", ""},
		{"group without tools", func(r *toolpb.Registration) { r.Groups[0].Tools = nil }, "has no tools", "text", ""},
		{"domain type without a name", func(r *toolpb.Registration) {
			r.Groups[0].DomainTypes = []*toolpb.DomainType{{TypeName: " "}}
		}, "empty type name", "text", ""},
		{"domain type with a bad schema", func(r *toolpb.Registration) {
			r.Groups[0].DomainTypes = []*toolpb.DomainType{{TypeName: "User", SchemaJson: `{"type":"objekt"}`}}
		}, `domain type "User"`, "text", ""},
		{"domain type twice", func(r *toolpb.Registration) {
			r.Groups[0].DomainTypes = []*toolpb.DomainType{{TypeName: "User"}, {TypeName: "User"}}
		}, `declares domain type "User" twice`, "text", ""},
		{"too many domain types", func(r *toolpb.Registration) {
			for i := range wire.MaxDomainTypes + 1 {
				r.Groups[0].DomainTypes = append(r.Groups[0].DomainTypes, &toolpb.DomainType{TypeName: "T" + strconv.Itoa(i)})
			}
		}, "65 domain types", "text", ""},
		{"tool without definition", func(r *toolpb.Registration) { firstTool(r).Definition = nil }, "tool name", "text", ""},
		{"bad tool name", func(r *toolpb.Registration) { firstTool(r).Definition.Name = "echo it" }, "tool name", "text", "echo it"},
		{"tool name too long", func(r *toolpb.Registration) {
			firstTool(r).Definition.Name = strings.Repeat("x", 65)
		}, "tool name", "text", strings.Repeat("x", 65)},
		{"tool twice", func(r *toolpb.Registration) {
			r.Groups[0].Tools = append(r.Groups[0].Tools, registered(echoTool("echo")))
		}, "registered twice", "text", "echo"},
		{"schema not JSON", func(r *toolpb.Registration) { firstTool(r).Definition.InputSchemaJson = "{" }, "input schema", "text", "echo"},
		{"schema not an object", func(r *toolpb.Registration) {
			firstTool(r).Definition.InputSchemaJson = `{"type":"string"}`
		}, "input schema", "text", "echo"},
		{"schema with remote ref", func(r *toolpb.Registration) {
			firstTool(r).Definition.InputSchemaJson = `{"type":"object","properties":{"a":{"$ref":"http://example.com/s.json"}}}`
		}, "input schema", "text", "echo"},
		{"negative timeout", func(r *toolpb.Registration) {
			firstTool(r).Definition.Timeout = durationpb.New(-time.Second)
		}, "timeout", "text", "echo"},
		{"invalid timeout", func(r *toolpb.Registration) {
			firstTool(r).Definition.Timeout = &durationpb.Duration{Seconds: 1, Nanos: -1}
		}, "timeout", "text", "echo"},
		{"missing content hash", func(r *toolpb.Registration) { firstTool(r).ContentHash = "" }, "content hash", "text", "echo"},
		{"content hash of another definition", func(r *toolpb.Registration) {
			firstTool(r).Definition.Description = "Changed after hashing."
		}, "content hash", "text", "echo"},
		// Bounds: an oversized value is described by its size, never echoed.
		{"worker id too long", func(r *toolpb.Registration) { r.WorkerId = strings.Repeat("w", 254) }, "worker_id is 254 bytes", "", ""},
		{"worker id of a megabyte", func(r *toolpb.Registration) { r.WorkerId = strings.Repeat("w", 1<<20) }, "worker_id is 1048576 bytes", "", ""},
		{"worker id with a slash", func(r *toolpb.Registration) { r.WorkerId = "a/b" }, "worker_id", "", ""},
		{"version with a newline", func(r *toolpb.Registration) { r.Version = "1.0\nINJECTED" }, "version holds the unprintable", "", ""},
		{"version of megabytes", func(r *toolpb.Registration) { r.Version = strings.Repeat("v", 3<<20) }, "version is 3145728 bytes", "", ""},
		{"address too long", func(r *toolpb.Registration) { r.Address = strings.Repeat("h", 300) + ":1" }, "address is 302 bytes", "", ""},
		{"group description too long", func(r *toolpb.Registration) {
			r.Groups[0].Group.Description = strings.Repeat("d", 8<<10+1)
		}, "description is 8193 bytes", "text", ""},
		{"tool description too long", func(r *toolpb.Registration) {
			firstTool(r).Definition.Description = strings.Repeat("d", 8<<10+1)
		}, "description is 8193 bytes", "text", "echo"},
		{"input schema too large", func(r *toolpb.Registration) {
			firstTool(r).Definition.InputSchemaJson = `{"type":"object","description":"` + strings.Repeat("s", 64<<10) + `"}`
		}, "input schema is", "text", "echo"},
		{"too much metadata", func(r *toolpb.Registration) {
			firstTool(r).Definition.Metadata = map[string]string{}
			for i := range 65 {
				firstTool(r).Definition.Metadata[strconv.Itoa(i)] = "v"
			}
		}, "metadata has 65 entries", "text", "echo"},
		{"metadata value too long", func(r *toolpb.Registration) {
			firstTool(r).Definition.Metadata = map[string]string{"k": strings.Repeat("v", 4<<10+1)}
		}, `metadata "k" is 4097 bytes`, "text", "echo"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRouter(t, Options{})
			reg := valid()
			tc.mutate(reg)
			lease, rej, err := r.Register(reg)
			if !errors.Is(err, ErrInvalidRegistration) {
				t.Fatalf("err = %v, want ErrInvalidRegistration", err)
			}
			if lease != nil {
				t.Errorf("lease = %v, want nil", lease)
			}
			if len(rej) != 1 {
				t.Fatalf("rejections = %v, want exactly one", rej)
			}
			if !strings.Contains(rej[0].GetReason(), tc.want) {
				t.Errorf("reason %.300q does not mention %q", rej[0].GetReason(), tc.want)
			}
			if len(rej[0].GetReason()) > 512 {
				t.Errorf("the reason is %d bytes long: it echoes the value", len(rej[0].GetReason()))
			}
			if rej[0].GetGroup() != tc.group || rej[0].GetTool() != tc.tool {
				t.Errorf("rejection points at group %q tool %q, want %q %q", rej[0].GetGroup(), rej[0].GetTool(), tc.group, tc.tool)
			}
			if !strings.Contains(err.Error(), rej[0].GetReason()) {
				t.Errorf("error %q does not carry the reason %q", err, rej[0].GetReason())
			}
			if n := len(r.ListWorkers()) + len(r.ListTools()) + len(r.ListGroups()); n != 0 {
				t.Errorf("a refused registration left %d entries in the table", n)
			}
		})
	}
}

func TestRegisterReportsEveryProblem(t *testing.T) {
	r := newRouter(t, Options{})
	reg := registration("", "nowhere", "text", echoTool("echo"), echoTool("bad name"))
	reg.Capacity = -3
	_, rej, err := r.Register(reg)
	if !errors.Is(err, ErrInvalidRegistration) {
		t.Fatalf("err = %v", err)
	}
	var reasons []string
	for _, x := range rej {
		reasons = append(reasons, x.GetReason())
	}
	for _, want := range []string{"worker_id", "address", "capacity", "tool name"} {
		if !strings.Contains(strings.Join(reasons, "\n"), want) {
			t.Errorf("rejections %q do not mention %q", reasons, want)
		}
	}
}

// A registration of thousands of bad tools is refused with a bounded answer: a worker
// must not be able to make the orchestrator build megabytes of rejections.
func TestRegisterBoundsItsRejections(t *testing.T) {
	r := newRouter(t, Options{})
	gr := &toolpb.GroupRegistration{Group: &toolpb.ToolGroupInfo{Role: "bad", Description: "bad tools"}}
	for i := range wire.MaxGroupTools {
		rt := registered(echoTool(fmt.Sprintf("t%d", i)))
		rt.ContentHash = strings.Repeat("h", 512)
		gr.Tools = append(gr.Tools, rt)
	}
	_, rej, err := r.Register(&toolpb.Registration{WorkerId: "w", Address: "127.0.0.1:1", Groups: []*toolpb.GroupRegistration{gr}})
	if !errors.Is(err, ErrInvalidRegistration) {
		t.Fatalf("err = %v", err)
	}
	if len(rej) != maxRejections || !strings.Contains(rej[len(rej)-1].GetReason(), fmt.Sprintf("and %d more", wire.MaxGroupTools-(maxRejections-1))) {
		t.Errorf("got %d rejections ending %q; want %d, the last counting the rest", len(rej), rej[len(rej)-1].GetReason(), maxRejections)
	}
	size := 0
	for _, x := range rej {
		size += proto.Size(x)
	}
	if want := fmt.Sprintf("and %d more", wire.MaxGroupTools-summarized); !strings.HasSuffix(err.Error(), want) {
		t.Errorf("error ends %q, want %q", wire.Truncate(err.Error()[max(0, len(err.Error())-64):], 64), want)
	}
	if size > 64<<10 || len(err.Error()) > 8<<10 {
		t.Errorf("rejections are %d bytes and the error %d bytes; want at most 64 KiB and 8 KiB", size, len(err.Error()))
	}
}

func TestRegisterRefusesToolOfAnotherGroup(t *testing.T) {
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("a", "127.0.0.1:9001", "text", echoTool("echo")))
	lease, rej, err := r.Register(registration("b", "127.0.0.1:9002", "other", echoTool("echo")))
	if !errors.Is(err, ErrConflict) || lease != nil {
		t.Fatalf("Register = %v, %v; want ErrConflict", lease, err)
	}
	if len(rej) != 1 || !strings.Contains(rej[0].GetReason(), `already registered by group "text"`) || rej[0].GetTool() != "echo" {
		t.Errorf("rejections = %v", rej)
	}
	if g, _ := r.GroupOf("echo"); g != "text" {
		t.Errorf("echo moved to group %q", g)
	}
}

func TestRegisterRefusesDifferentGroupInfo(t *testing.T) {
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("a", "127.0.0.1:9001", "text", echoTool("echo")))
	reg := registration("b", "127.0.0.1:9002", "text", echoTool("echo"))
	reg.Groups[0].Group.Description = "text tools, said otherwise under the same version"
	_, rej, err := r.Register(reg)
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	if len(rej) != 1 || rej[0].GetGroup() != "text" || !strings.Contains(rej[0].GetReason(), "different description") {
		t.Errorf("rejections = %v", rej)
	}
}

func TestRegisterRefusesConflictingDefinitionWhileFirstReplicaLives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // no RPC is made: grace periods pass in fake time
		r := newRouter(t, Options{GracePeriod: 3 * time.Second})
		first := mustRegister(t, r, registration("a", "127.0.0.1:9001", "text", echoTool("echo")))
		changed := registration("b", "127.0.0.1:9002", "text", echoTool("echo", tool.Idempotent()))

		_, rej, err := r.Register(changed)
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("err = %v, want ErrConflict", err)
		}
		if len(rej) != 1 || rej[0].GetTool() != "echo" || !strings.Contains(rej[0].GetReason(), "different definition") ||
			!strings.Contains(rej[0].GetReason(), "replicas of a tool must serve the same definition") {
			t.Errorf("rejections = %v", rej)
		}
		if got := r.ListTools()[0].GetWorkerIds(); !cmp.Equal(got, []string{"a"}) {
			t.Errorf("echo is served by %v after a refused registration, want [a]", got)
		}

		// Disconnected but within its grace period, a still holds the definition.
		first.End()
		time.Sleep(2 * time.Second)
		if _, _, err := r.Register(changed); !errors.Is(err, ErrConflict) {
			t.Errorf("during a's grace period: err = %v, want ErrConflict", err)
		}

		time.Sleep(time.Second)
		synctest.Wait()
		mustRegister(t, r, changed)
		tools := r.ListTools()
		if len(tools) != 1 || !tools[0].GetDefinition().GetIdempotent() || !cmp.Equal(tools[0].GetWorkerIds(), []string{"b"}) {
			t.Errorf("ListTools = %v, want b's idempotent echo", tools)
		}
	})
}

func TestRegisterRefusesWholeRegistrationOnOneConflict(t *testing.T) {
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("a", "127.0.0.1:9001", "text", echoTool("echo")))
	reg := registration("b", "127.0.0.1:9002", "math", echoTool("add"))
	reg.Groups = append(reg.Groups, registration("b", "127.0.0.1:9002", "text", echoTool("echo", tool.Idempotent())).Groups[0])
	if _, _, err := r.Register(reg); !errors.Is(err, ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	if _, err := r.Tool("add"); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("Tool(add) = %v: part of a refused registration was applied", err)
	}
	if len(r.ListWorkers()) != 1 {
		t.Errorf("workers = %v", r.ListWorkers())
	}
}

func TestRegisterMergesReplicasWithTheSameHash(t *testing.T) {
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("b", "127.0.0.1:9002", "text", echoTool("echo"), echoTool("shout")))
	mustRegister(t, r, registration("a", "127.0.0.1:9001", "text", echoTool("echo")))

	tools := r.ListTools()
	if len(tools) != 2 {
		t.Fatalf("ListTools = %v", tools)
	}
	if got := tools[0].GetWorkerIds(); tools[0].GetDefinition().GetName() != "echo" || !cmp.Equal(got, []string{"a", "b"}) {
		t.Errorf("echo served by %v, want [a b]", got)
	}
	if got := tools[1].GetWorkerIds(); !cmp.Equal(got, []string{"b"}) {
		t.Errorf("shout served by %v, want [b]", got)
	}
	groups := r.ListGroups()
	if len(groups) != 1 || !cmp.Equal(groups[0].GetWorkerIds(), []string{"a", "b"}) || !cmp.Equal(groups[0].GetTools(), []string{"echo", "shout"}) {
		t.Errorf("ListGroups = %v", groups)
	}
	info, ts, err := r.Group("text")
	if err != nil || info.GetRole() != "text" || len(ts) != 2 || ts[0].Definition().Name != "echo" {
		t.Errorf("Group(text) = %v, %v, %v", info, ts, err)
	}
	if _, _, err := r.Group("nope"); !errors.Is(err, ErrUnknownGroup) {
		t.Errorf("Group(nope) err = %v", err)
	}
	if got := r.ListTools("other"); len(got) != 0 {
		t.Errorf("ListTools(other) = %v", got)
	}
}

// TestRegisterSameIDReplacesAnEndedLease: a worker whose stream ended registers again
// under its id (it reconnected) and takes its place back, with whatever it registers now.
func TestRegisterSameIDReplacesAnEndedLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // no RPC is made: grace periods pass in fake time
		r := newRouter(t, Options{GracePeriod: time.Second})
		old := mustRegister(t, r, registration("a", "127.0.0.1:9001", "text", echoTool("echo"), echoTool("shout")))
		old.End() // its stream broke; the grace period runs
		// The replacement may change a definition nobody else serves.
		reg := registration("a", "127.0.0.1:9002", "text", echoTool("echo", tool.Idempotent()))
		reg.Capacity = 4
		cur := mustRegister(t, r, reg)
		if cur.ID() == old.ID() {
			t.Errorf("replacement kept lease id %s", cur.ID())
		}

		ws := r.ListWorkers()
		if len(ws) != 1 || ws[0].GetAddress() != "127.0.0.1:9002" || ws[0].GetCapacity() != 4 || ws[0].GetState() != toolpb.WorkerState_WORKER_STATE_READY {
			t.Fatalf("ListWorkers = %v", ws)
		}
		tools := r.ListTools()
		if len(tools) != 1 || tools[0].GetDefinition().GetName() != "echo" || !tools[0].GetDefinition().GetIdempotent() {
			t.Fatalf("ListTools = %v", tools)
		}

		// Whatever the replaced lease still reports must not touch the new one.
		old.Drain()
		old.End()
		time.Sleep(time.Minute)
		synctest.Wait()
		if ws := r.ListWorkers(); len(ws) != 1 || ws[0].GetState() != toolpb.WorkerState_WORKER_STATE_READY {
			t.Errorf("after the old lease ended: ListWorkers = %v", ws)
		}
	})
}

// TestRegisterRefusesTheIDOfALiveLease: a second registration under the id of a worker
// whose stream is open is refused, and the worker holding the id is never orphaned: not
// while the newcomer is refused, not after it gives up.
func TestRegisterRefusesTheIDOfALiveLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, Options{GracePeriod: time.Second})
		real := mustRegister(t, r, registration("x", "127.0.0.1:9001", "text", echoTool("echo")))
		for _, state := range []string{"ready", "draining"} {
			if state == "draining" {
				real.Drain()
			}
			_, rej, err := r.Register(registration("x", "127.0.0.1:9666", "text", echoTool("echo")))
			if !errors.Is(err, ErrWorkerIDInUse) || len(rej) != 1 || !strings.Contains(rej[0].GetReason(), "still open") {
				t.Fatalf("%s: second registration of x = %v, %v; want ErrWorkerIDInUse", state, rej, err)
			}
			if ws := r.ListWorkers(); len(ws) != 1 || ws[0].GetAddress() != "127.0.0.1:9001" {
				t.Fatalf("%s: the refused registration changed the table: %v", state, ws)
			}
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		ws := r.ListWorkers()
		if len(ws) != 1 || ws[0].GetWorkerId() != "x" || ws[0].GetAddress() != "127.0.0.1:9001" {
			t.Fatalf("the real worker left the table: %v", ws)
		}
		real.Heartbeat(3)
		if got := r.ListWorkers()[0]; got.GetState() != toolpb.WorkerState_WORKER_STATE_DRAINING {
			t.Errorf("the real worker's lease no longer reaches its entry: %v", got)
		}
		real.End() // now the id is free
		if _, _, err := r.Register(registration("x", "127.0.0.1:9666", "text", echoTool("echo"))); err != nil {
			t.Errorf("registration after the holder's stream ended: %v", err)
		}
	})
}

// TestRegisterHandsALiveLeaseOver: a worker moving its registration to a new stream (its
// certificate rotated) registers again naming its live lease; the new lease takes its
// place without the worker ever leaving the table, and the old lease is told to end.
// Naming another lease, or coming from another address or identity, is still refused.
func TestRegisterHandsALiveLeaseOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, Options{GracePeriod: time.Second})
		const me = "spiffe://td/worker/x"
		old, _, err := r.RegisterAs(registration("x", "127.0.0.1:9001", "text", echoTool("echo")), me)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []struct {
			name     string
			reg      *toolpb.Registration
			identity string
		}{
			{"another lease", withReplaces(registration("x", "127.0.0.1:9001", "text", echoTool("echo")), "not-"+old.ID()), me},
			{"another address", withReplaces(registration("x", "127.0.0.1:9666", "text", echoTool("echo")), old.ID()), me},
			{"another identity", withReplaces(registration("x", "127.0.0.1:9001", "text", echoTool("echo")), old.ID()), "spiffe://td/worker/other"},
			{"no identity (plaintext)", withReplaces(registration("x", "127.0.0.1:9001", "text", echoTool("echo")), old.ID()), ""},
		} {
			if _, _, err := r.RegisterAs(bad.reg, bad.identity); err == nil {
				t.Fatalf("%s: a handover was accepted", bad.name)
			}
			select {
			case <-old.Replaced():
				t.Fatalf("%s: a refused handover ended the live lease", bad.name)
			default:
			}
		}
		if _, _, err := r.RegisterAs(withReplaces(registration("x", "127.0.0.1:9001", "text", echoTool("echo")), old.ID()), me); err != nil {
			t.Fatal(err)
		}
		select {
		case <-old.Replaced():
		default:
			t.Fatal("the old lease was not told it was replaced")
		}
		if ws := r.ListWorkers(); len(ws) != 1 || ws[0].GetState() != toolpb.WorkerState_WORKER_STATE_READY {
			t.Fatalf("after the handover: ListWorkers = %v", ws)
		}
		// The old stream ends now; that must not touch the new lease.
		old.End()
		time.Sleep(time.Minute)
		synctest.Wait()
		if ws := r.ListWorkers(); len(ws) != 1 || ws[0].GetState() != toolpb.WorkerState_WORKER_STATE_READY {
			t.Errorf("after the old lease ended: ListWorkers = %v", ws)
		}
		if _, err := r.Tool("echo"); err != nil {
			t.Errorf("echo after the handover: %v", err)
		}
	})
}

func withReplaces(reg *toolpb.Registration, lease string) *toolpb.Registration {
	reg.ReplacesLeaseId = lease
	return reg
}

func TestRegisterAfterClose(t *testing.T) {
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("a", "127.0.0.1:9001", "text", echoTool("echo")))
	r.Close()
	if _, _, err := r.Register(registration("b", "127.0.0.1:9002", "text", echoTool("echo"))); !errors.Is(err, ErrClosed) {
		t.Errorf("err = %v, want ErrClosed", err)
	}
	if len(r.ListWorkers()) != 0 {
		t.Errorf("Close left workers: %v", r.ListWorkers())
	}
}

// TestRegisterKeepsTheTableWithinItsLimits: registrations that would take the table past
// a limit are refused with ErrTableFull and leave it as it was; a worker replacing itself
// is counted without what it replaces, and a worker leaving makes room.
func TestRegisterKeepsTheTableWithinItsLimits(t *testing.T) {
	t.Run("workers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { // no RPC is made: the removal runs in the bubble
			r := newRouter(t, Options{Limits: Limits{MaxWorkers: 2}})
			l1 := mustRegister(t, r, registration("w1", "127.0.0.1:1", "text", echoTool("echo")))
			mustRegister(t, r, registration("w2", "127.0.0.1:1", "text", echoTool("echo")))
			if _, _, err := r.Register(registration("w3", "127.0.0.1:1", "text", echoTool("echo"))); !errors.Is(err, ErrTableFull) {
				t.Fatalf("third worker = %v, want ErrTableFull", err)
			}
			l1.Drain()
			l1.End() // a draining worker leaves at once
			synctest.Wait()
			if len(r.ListWorkers()) > 1 {
				t.Fatal("w1 did not leave")
			}
			mustRegister(t, r, registration("w3", "127.0.0.1:1", "text", echoTool("echo")))
		})
	})
	t.Run("tools", func(t *testing.T) {
		r := newRouter(t, Options{Limits: Limits{MaxTools: 3}})
		mustRegister(t, r, registration("w1", "127.0.0.1:1", "a", echoTool("a1"), echoTool("a2")))
		_, rej, err := r.Register(registration("w2", "127.0.0.1:1", "b", echoTool("b1"), echoTool("b2")))
		if !errors.Is(err, ErrTableFull) || len(rej) != 1 || !strings.Contains(rej[0].GetReason(), "4 tools; its maximum is 3") {
			t.Fatalf("two more tools = %v %v, want ErrTableFull saying 4 of 3", rej, err)
		}
		if n := len(r.ListTools()); n != 2 {
			t.Errorf("the refusal left %d tools, want 2", n)
		}
		// Replicas of tools already in the table take no room.
		mustRegister(t, r, registration("w3", "127.0.0.1:1", "a", echoTool("a1"), echoTool("a2")))
	})
	t.Run("served tools", func(t *testing.T) {
		r := newRouter(t, Options{Limits: Limits{MaxServedTools: 3}})
		l := mustRegister(t, r, registration("w1", "127.0.0.1:1", "a", echoTool("a1"), echoTool("a2")))
		// Replicas take no room among distinct tools, but they do here.
		if _, _, err := r.Register(registration("w2", "127.0.0.1:1", "a", echoTool("a1"), echoTool("a2"))); !errors.Is(err, ErrTableFull) {
			t.Fatalf("a replica of two tools = %v, want ErrTableFull", err)
		}
		l.End()
		mustRegister(t, r, registration("w1", "127.0.0.1:1", "a", echoTool("a1"), echoTool("a2"))) // replaces itself
		if r.served != 2 {
			t.Errorf("served = %d, want 2", r.served)
		}
	})
	t.Run("definition bytes", func(t *testing.T) {
		one := int64(proto.Size(registered(echoTool("t0")).GetDefinition()))
		r := newRouter(t, Options{Limits: Limits{MaxDefinitionBytes: 2*one + one/2}})
		l := mustRegister(t, r, registration("w1", "127.0.0.1:1", "g", echoTool("t0"), echoTool("t1")))
		if _, _, err := r.Register(registration("w2", "127.0.0.1:1", "h", echoTool("t2"))); !errors.Is(err, ErrTableFull) {
			t.Fatalf("a third definition = %v, want ErrTableFull", err)
		}
		// w1 coming back with other tools of the same size replaces its own.
		l.End()
		mustRegister(t, r, registration("w1", "127.0.0.1:1", "g", echoTool("t3"), echoTool("t4")))
		if r.defBytes != 2*one {
			t.Errorf("defBytes = %d, want %d", r.defBytes, 2*one)
		}
	})
}

// A worker's domain types are known while it is registered, and count against the
// table's definition bytes.
func TestRegisterDomainTypes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // no RPC is made: the grace period passes in fake time
		r := newRouter(t, Options{GracePeriod: time.Millisecond, Limits: Limits{MaxDefinitionBytes: 1 << 20}})
		reg := registration("w1", "127.0.0.1:9000", "text", echoTool("echo"))
		reg.Groups[0].DomainTypes = []*toolpb.DomainType{{TypeName: "users.User", Description: "A user.", SchemaJson: `{"type":"object","required":["id"]}`}}
		lease, rej, err := r.Register(reg)
		if err != nil {
			t.Fatalf("Register: %v %v", err, rej)
		}
		d, ok := r.DomainType("users.User")
		if !ok || d.Description != "A user." {
			t.Fatalf("DomainType: %+v, %v", d, ok)
		}
		if _, err := d.Schema.Validate(`{"name":"x"}`); err == nil {
			t.Error("the schema does not require id")
		}
		big := registration("w2", "127.0.0.1:9001", "big", echoTool("echo2"))
		big.Groups[0].DomainTypes = []*toolpb.DomainType{{TypeName: "Big", Description: strings.Repeat("x", 8<<10)}}
		for i := range 63 {
			big.Groups[0].DomainTypes = append(big.Groups[0].DomainTypes, &toolpb.DomainType{TypeName: "B" + strconv.Itoa(i), SchemaJson: `{"type":"object","description":"` + strings.Repeat("y", 30<<10) + `"}`})
		}
		if _, _, err := r.Register(big); !errors.Is(err, ErrTableFull) {
			t.Errorf("a registration whose domain types pass the definition bytes: %v", err)
		}
		lease.End()
		time.Sleep(time.Millisecond) // the grace period
		synctest.Wait()
		if _, ok := r.DomainType("users.User"); ok {
			t.Fatal("w1 did not leave: its domain type is still known after its grace period")
		}
	})
}

// versioned is a registration of the text group at a version, its echo described by desc.
func versioned(id, addr, version, desc string) *toolpb.Registration {
	reg := registration(id, addr, "text", tool.New("echo", desc, schema.Params(schema.String("text", "what to echo").AsOptional()),
		func(context.Context, string) (tool.Result, error) { return tool.Text("unused"), nil }))
	reg.Groups[0].Group.Version = version
	return reg
}

// TestRolloutKeepsEachRunsDefinition: a worker of a new version of a group, whose echo
// reads differently, registers beside the old version's replicas (a rolling update). New
// runs get the new definition; a tool handed out before is sent only to replicas of its
// own definition, until the last of them leaves. A replica of the old version that
// reconnects meanwhile joins the old definition; when the new version's replicas all
// leave (a rollout undone), the old definition is what new runs get again.
func TestRolloutKeepsEachRunsDefinition(t *testing.T) {
	r := newRouter(t, Options{PinDefinitions: true})
	mustRegister(t, r, versioned("a", "127.0.0.1:9001", "1", "Echoes its input."))
	before, err := r.Tool("echo")
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, r, versioned("b", "127.0.0.1:9002", "2", "Echoes its input, trimmed."))
	after, err := r.Tool("echo")
	if err != nil {
		t.Fatal(err)
	}
	if after.Definition().Description != "Echoes its input, trimmed." {
		t.Errorf("new runs get %q, want version 2's definition", after.Definition().Description)
	}
	if gs := r.ListGroups(); len(gs) != 1 || gs[0].GetGroup().GetVersion() != "2" {
		t.Errorf("ListToolGroups = %v, want version 2", gs)
	}
	picks := func(tl tool.Tool) map[string]int {
		out := map[string]int{}
		for range 50 {
			w, changed := r.pick(tl.(*remoteTool), nil)
			switch {
			case changed:
				out["changed"]++
			case w == nil:
				out["none"]++
			default:
				out[w.id]++
			}
		}
		return out
	}
	if got := picks(before); !cmp.Equal(got, map[string]int{"a": 50}) {
		t.Errorf("the old definition's calls went to %v, want a only", got)
	}
	if got := picks(after); !cmp.Equal(got, map[string]int{"b": 50}) {
		t.Errorf("the new definition's calls went to %v, want b only", got)
	}
	// Another replica of version 1 (a pod of the old ReplicaSet restarting) joins version 1.
	mustRegister(t, r, versioned("c", "127.0.0.1:9003", "1", "Echoes its input."))
	if got := picks(before); got["a"]+got["c"] != 50 || got["b"] != 0 {
		t.Errorf("the old definition's calls went to %v, want a and c", got)
	}
	if now, _ := r.Tool("echo"); now.Definition().Description != "Echoes its input, trimmed." {
		t.Errorf("after an old replica rejoined, new runs get %q", now.Definition().Description)
	}
	// A changed definition under a version already registered is still refused.
	if _, _, err := r.Register(versioned("d", "127.0.0.1:9004", "2", "Echoes something else.")); err == nil {
		t.Error("a third definition under version 2 was accepted")
	}

	// The new version leaves (the rollout is undone): version 1 is current again.
	drop := func(id string) { // as the router drops a worker whose lease ended
		r.mu.Lock()
		w := r.workers[id]
		r.removeLocked(w)
		r.mu.Unlock()
		w.close()
	}
	drop("b")
	if now, _ := r.Tool("echo"); now.Definition().Description != "Echoes its input." {
		t.Errorf("with version 2 gone, new runs get %q", now.Definition().Description)
	}
	if gs := r.ListGroups(); len(gs) != 1 || gs[0].GetGroup().GetVersion() != "1" {
		t.Errorf("ListToolGroups = %v, want version 1 again", gs)
	}
	if got := picks(after); got["changed"] != 50 {
		t.Errorf("calls of version 2's definition with no replica of it: %v, want all refused as changed", got)
	}
	if got := picks(before); got["a"]+got["c"] != 50 {
		t.Errorf("version 1's calls went to %v", got)
	}

	// And the old replicas leave: nothing of either definition remains.
	drop("a")
	drop("c")
	if _, err := r.Tool("echo"); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("Tool after every replica left: %v", err)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.older) != 0 || r.defBytes != 0 {
		t.Errorf("left behind: older %v, %d definition bytes", r.older, r.defBytes)
	}
}

// TestPinHoldsARunToItsVersion: a run that moved to another orchestrator asks for the
// tools of the group versions it was shown when it started (Versions, then Pin): during
// a rollout it gets version 1's stub, whose calls go to version 1's replicas; once they
// are gone it gets what is served now, and Pin says so.
func TestPinHoldsARunToItsVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // no RPC is made: the removal runs in the bubble
		r := newRouter(t, Options{PinDefinitions: true})
		v1 := mustRegister(t, r, versioned("a", "127.0.0.1:9001", "1", "Echoes its input."))
		shown := r.Versions([]string{"text"}, nil)
		if !cmp.Equal(shown, map[string]string{"text": "1"}) {
			t.Fatalf("Versions = %v", shown)
		}
		mustRegister(t, r, versioned("b", "127.0.0.1:9002", "2", "Echoes its input, trimmed."))
		now, err := r.Tool("echo") // what a resumed run resolves: the newest
		if err != nil {
			t.Fatal(err)
		}
		pinned, ok := r.Pin(now, shown)
		if !ok || pinned.Definition().Description != "Echoes its input." {
			t.Fatalf("Pin = %q, %v; want version 1's definition", pinned.Definition().Description, ok)
		}
		if w, changed := r.pick(pinned.(*remoteTool), nil); changed || w == nil || w.id != "a" {
			t.Errorf("the pinned stub's call went to %v (changed %v), want a", w, changed)
		}
		if same, ok := r.Pin(now, map[string]string{"text": "2"}); !ok || same != now {
			t.Error("Pin of the version served now changed the tool")
		}
		v1.Drain()
		v1.End() // a draining worker leaves at once
		synctest.Wait()
		if len(r.ListWorkers()) != 1 {
			t.Fatal("the drained replica did not leave")
		}
		if got, ok := r.Pin(now, shown); ok || got != now {
			t.Errorf("with version 1 gone Pin = %v, %v; want the tool served now and false", got.Definition().Description, ok)
		}
	})
}

// TestOldReplicaReconnectingKeepsTheRollout: during a rollout, the last replica of the
// old version registers again under its id — moving its registration to a new
// connection (its certificate rotated), or reconnecting within its grace period. The
// newest version stays what new runs get; the old replica rejoins the old definition.
func TestOldReplicaReconnectingKeepsTheRollout(t *testing.T) {
	for _, how := range []string{"handover", "reconnect"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRouter(t, Options{PinDefinitions: true, GracePeriod: time.Second})
				const me = "spiffe://td/worker/loud"
				a, _, err := r.RegisterAs(versioned("a", "127.0.0.1:9001", "1", "Echoes its input."), me)
				if err != nil {
					t.Fatal(err)
				}
				old, _ := r.Tool("echo")
				if _, _, err := r.RegisterAs(versioned("b", "127.0.0.1:9002", "2", "Echoes its input, trimmed."), me); err != nil {
					t.Fatal(err)
				}
				again := versioned("a", "127.0.0.1:9001", "1", "Echoes its input.")
				if how == "handover" {
					again.ReplacesLeaseId = a.ID()
				} else {
					a.End()
				}
				if _, _, err := r.RegisterAs(again, me); err != nil {
					t.Fatal(err)
				}
				if now, _ := r.Tool("echo"); now.Definition().Description != "Echoes its input, trimmed." {
					t.Errorf("new runs get %q, want version 2's definition", now.Definition().Description)
				}
				if gs := r.ListGroups(); len(gs) != 1 || gs[0].GetGroup().GetVersion() != "2" {
					t.Errorf("the group is %v, want version 2", gs)
				}
				if w, changed := r.pick(old.(*remoteTool), nil); changed || w == nil || w.id != "a" {
					t.Errorf("a version 1 call went to %v (changed %v), want a", w, changed)
				}
			})
		})
	}
}
