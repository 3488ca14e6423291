package runlog_test

import (
	"context"
	"testing"

	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/runlog/runlogtest"
)

// The journal in memory behaves as the databases do, but for outliving its process.
func TestMemory(t *testing.T) {
	runlogtest.RunVolatile(t, func(t *testing.T) runlog.Store {
		s, err := runlog.OpenMemory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
