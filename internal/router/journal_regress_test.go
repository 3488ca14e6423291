package router

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"google.golang.org/protobuf/proto"
)

// A worker answer that fits the 4 MiB message limit, journaled as its outcome record.
func TestOutcomeRecordSize(t *testing.T) {
	for _, c := range []struct{ name, unit string }{{"html", "<a>&"}, {"text", "abcd"}, {"json-in-json", `"\"\`}, {"newlines", "\n\t\n\t"}} {
		content := strings.Repeat(c.unit, (wire.MaxMessageBytes-(128<<10))/4)
		resp := &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: content}}
		data := encodeOutcome(wire.ResultFromProto(resp), resp)
		// As journal.Finished wraps it.
		rec, _ := json.Marshal(struct {
			Key     string          `json:"key"`
			Outcome string          `json:"outcome"`
			Data    json.RawMessage `json:"data"`
		}{"k", "succeeded", data})
		t.Logf("%s: message %d bytes -> outcome record %d bytes (limit %d): over=%v", c.name, proto.Size(resp), len(rec), runlog.MaxRecordBytes, len(rec) > runlog.MaxRecordBytes)
	}
}
