package runlog

import "testing"

// The memory store keeps a record's data as it was handed over when the array holds
// little more, and copies it when the array has much more room than the data fills
// (an array the store would keep whole); it counts the array it keeps.
func TestMemoryKeepsDataWithoutSlack(t *testing.T) {
	tight := make([]byte, 100, 120)
	if got, size := kept(tight); &got[0] != &tight[0] || cap(got) != len(tight) || size != 120 {
		t.Errorf("kept(tight) copied it, or left it room to grow into the caller's array, or counted %d bytes of its 120", size)
	}
	roomy := make([]byte, 8, 1024)
	if got, size := kept(roomy); &got[0] == &roomy[0] || cap(got) > 64 || size != int64(cap(got)) {
		t.Errorf("kept(roomy) kept an array of %d bytes for 8, counted %d", cap(got), size)
	}
	if got, size := kept([]byte{}); got != nil || size != 0 {
		t.Error("kept of no data is not nil")
	}
}
