package runlog

import "testing"

// The memory store keeps a record's data as it was handed over when the array holds
// little more, and copies it when the array has much more room than the data fills
// (which its bound on bytes would not count).
func TestMemoryKeepsDataWithoutSlack(t *testing.T) {
	tight := []byte(`{"a":1}`)
	if got := kept(tight); &got[0] != &tight[0] || cap(got) != len(tight) {
		t.Errorf("kept(tight) copied it, or left it room to grow into the caller's array")
	}
	roomy := make([]byte, 8, 1024)
	if got := kept(roomy); &got[0] == &roomy[0] || cap(got) > 64 {
		t.Errorf("kept(roomy) kept an array of %d bytes for 8", cap(got))
	}
	if kept([]byte{}) != nil {
		t.Error("kept of no data is not nil")
	}
}
