package bench

import "testing"

// The journal directory's synchronous write is timed, on whatever file system the
// temporary directory is (where direct I/O is refused, without it).
func TestProbeSyncWrite(t *testing.T) {
	us, idle, err := probeSyncWrite(t.TempDir())
	if err != nil || !(us > 0) || !(idle > 0) {
		t.Fatalf("%v µs back to back, %v µs after the disk was idle, %v", us, idle, err)
	}
}
