package bench

import "testing"

// The journal directory's synchronous write is timed, on whatever file system the
// temporary directory is (where direct I/O is refused, without it).
func TestProbeSyncWrite(t *testing.T) {
	us, err := probeSyncWrite(t.TempDir())
	if err != nil || !(us > 0) {
		t.Fatalf("%v µs, %v", us, err)
	}
}
