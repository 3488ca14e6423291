package router

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// tableNames are names of every length from 0 to 70 bytes, of which many share their
// first and last 8 bytes (and so their words) with others of the same length.
func tableNames() []string {
	var names []string
	for n := range 71 {
		for v := range 6 {
			b := []byte(strings.Repeat("a", n))
			if n > 0 {
				b[(v*7)%n] = byte('b' + v)
			}
			names = append(names, string(b))
		}
	}
	return names
}

// TestToolTableAgreesWithAMap: random batches of additions, replacements and removals,
// growing the table to thousands of names and shrinking it again; after every batch the
// table built from the last one (with) finds exactly what a map holds, with the entry's
// stub (none for a facade), and nothing else.
func TestToolTableAgreesWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	names := tableNames()
	for i := range 3000 {
		names = append(names, fmt.Sprintf("tool_%05d", i), fmt.Sprintf("a_longer_tool_name_%05d", i))
	}
	want := map[string]*toolEntry{}
	x := newToolTable()
	for batch := range 300 {
		var changed []string
		for range rng.IntN(200) {
			name := names[rng.IntN(len(names))]
			// Early batches mostly add, late ones mostly remove.
			if rng.IntN(300) >= batch {
				want[name] = &toolEntry{def: tool.Definition{Name: name}, stub: &remoteTool{def: tool.Definition{Name: name}}}
				if rng.IntN(10) == 0 {
					want[name].facade = &toolpb.FacadeNode{}
				}
			} else {
				delete(want, name)
			}
			changed = append(changed, name)
		}
		x = x.with(want, changed)
		if x.n != len(want) || len(x.slots) < tableSize(len(want)) {
			t.Fatalf("batch %d: the table holds %d in %d slots, the map %d", batch, x.n, len(x.slots), len(want))
		}
		checkTable(t, x, want, names)
	}
}

// checkTable fails t unless x holds exactly want, of names.
func checkTable(t *testing.T, x *toolTable, want map[string]*toolEntry, names []string) {
	t.Helper()
	for _, name := range append(names, "tool_99999", strings.Repeat("z", 300)) {
		stub, ok := x.get(name)
		e, wok := want[name]
		switch {
		case ok != wok:
			t.Fatalf("get(%q) found %v, want %v", name, ok, wok)
		case ok && e.facade != nil && stub != nil:
			t.Fatalf("get(%q) returned a stub for a facade", name)
		case ok && e.facade == nil && stub != e.stub:
			t.Fatalf("get(%q) returned stub %p, want %p", name, stub, e.stub)
		}
	}
}

// Tool looks names up without the lock while workers register and leave: a tool whose
// worker stays is always found, and one whose workers come and go is found as itself or
// not at all.
func TestToolDuringRegistrations(t *testing.T) {
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("stays", "127.0.0.1:9001", "steady", echoTool("steady")))
	stop := lookUpWhile(2, func() error {
		if _, err := r.Tool("steady"); err != nil {
			return fmt.Errorf("Tool(steady) = %w during registrations", err)
		}
		if tl, err := r.Tool("coming_and_going_tool"); err != nil && !errors.Is(err, ErrUnknownTool) || err == nil && tl.Definition().Name != "coming_and_going_tool" {
			return fmt.Errorf("Tool(coming_and_going_tool) = %v, %w", tl, err)
		}
		return nil
	})
	for i := range 200 {
		id := fmt.Sprintf("flaps-%d", i%3)
		mustRegister(t, r, registration(id, "127.0.0.1:9002", "flapping", echoTool("coming_and_going_tool"), echoTool(fmt.Sprintf("t%d", i))))
		r.expire(workerOf(t, r, id))
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
	if _, err := r.Tool("coming_and_going_tool"); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("Tool of a tool whose workers left: %v, want ErrUnknownTool", err)
	}
}

// A worker that registers again under its id (a restart, a new address) never leaves its
// tools unknown to lookups made meanwhile: the table is published once the replacement
// is whole.
func TestToolDuringReregistration(t *testing.T) {
	r := newRouter(t, Options{GracePeriod: time.Hour})
	lease := mustRegister(t, r, registration("again", "127.0.0.1:9001", "steady", echoTool("steady")))
	stop := lookUpWhile(1, func() error {
		if _, err := r.Tool("steady"); err != nil {
			return fmt.Errorf("Tool(steady) = %w while its worker registers again", err)
		}
		return nil
	})
	for i := range 300 {
		lease.End() // its stream ended; within the grace period it registers again
		lease = mustRegister(t, r, registration("again", fmt.Sprintf("127.0.0.1:%d", 9001+i%2), "steady", echoTool("steady")))
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
}

// lookUpWhile runs check again and again on n goroutines until the function it returns
// is called, which returns the first error a check returned.
func lookUpWhile(n int, check func() error) (stop func() error) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if err := check(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	return func() error {
		close(done)
		wg.Wait()
		select {
		case err := <-errs:
			return err
		default:
			return nil
		}
	}
}
