package runlog

import (
	"errors"
	"testing"
)

// TestCheckAppendAllocatesNothing: the checks every append passes run on each record of
// every run's commit, so a valid append costs them no allocation (naming a bad record's
// field, which formats, is for the refusal only).
func TestCheckAppendAllocatesNothing(t *testing.T) {
	lease := Lease{RunID: "r1", Owner: "o", Epoch: 1}
	records := []Record{{Seq: 1, Kind: KindEvent, Data: []byte("a")}, {Seq: 2, Kind: KindDispatch, Data: []byte("b")}}
	if allocs := testing.AllocsPerRun(100, func() {
		if err := checkAppend(lease, records); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("checkAppend of a valid append: %v allocations, want 0", allocs)
	}
	bad := []Record{{Seq: 1, Kind: KindEvent}, {Seq: 2, Kind: "k\x00"}}
	err := checkAppend(lease, bad)
	if !errors.Is(err, ErrInvalid) || err.Error() != "runlog: invalid: record 1's kind must be UTF-8 text without NUL bytes" {
		t.Errorf("checkAppend of a kind with a NUL: %v", err)
	}
}
