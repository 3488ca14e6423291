package run

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/runlog"
)

// TestRenewerKeepsEveryLease: one renewer keeps the leases of many journals alive past
// their time to live, stops renewing a journal once it is closed (its lease then runs
// out), and ends its goroutine when it holds none.
func TestRenewerKeepsEveryLease(t *testing.T) {
	store, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	const ttl = 300 * time.Millisecond
	r := newRenewer(ttl)
	var js []*journal
	for i := range 20 {
		l, err := store.Create(context.Background(), fmt.Sprintf("r%d", i), "me", ttl)
		if err != nil {
			t.Fatal(err)
		}
		j := newJournal(store, r, l, ttl, nil, 1)
		j.start()
		js = append(js, j)
	}
	time.Sleep(3 * ttl)
	for i, j := range js {
		j.mu.Lock()
		until, failed := j.lease.Until, j.failed
		j.mu.Unlock()
		if failed != nil || !until.After(time.Now()) {
			t.Fatalf("journal %d: lease until %s (now %s), failed %v", i, until.Format(time.StampMilli), time.Now().Format(time.StampMilli), failed)
		}
	}
	closed := js[0]
	if err := closed.close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl)
	if run, _ := store.Get(context.Background(), "r0"); run.Until.After(time.Now()) {
		t.Errorf("a closed journal's lease was renewed: until %s", run.Until)
	}
	for _, j := range js[1:] {
		_ = j.close()
	}
	r.mu.Lock()
	running := r.running
	r.mu.Unlock()
	if running {
		t.Error("the renewer goes on with no journal to renew")
	}
}

// TestOfferedRoles: the groups a journaled run records the versions of are its required
// groups, its own and the config's defaults — a run offered only required groups is held
// to their versions too when another orchestrator takes it over.
func TestOfferedRoles(t *testing.T) {
	got := offeredRoles(Request{Required: []Requirement{{Role: "payments"}}, Groups: []string{"math"}}, []string{"text"})
	if fmt.Sprint(got) != "[payments math text]" {
		t.Errorf("offeredRoles = %v", got)
	}
}
