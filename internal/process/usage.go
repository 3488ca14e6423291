package process

import (
	"encoding/json"
	"fmt"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// EmbeddingUsageType is the type name of a usage report: the object a tool puts on the
// run's blackboard (tool.BlackboardFrom(ctx).Add, on a worker as in the orchestrator)
// for each call it made of an embedding model, such as
// {"provider":"openai","model":"text-embedding-3-small"}.
//
// The orchestrator calls no embedding model itself: a tool that does says so with the
// report, which counts as an embedding invocation of the run (process_cost) and names
// the model (process_models). It never joins the blackboard.
const EmbeddingUsageType = "toolmesh.EmbeddingUsage"

// embeddingReport reads e as a usage report. ok says whether e is one (its type name is
// EmbeddingUsageType); err, what is wrong with one that is.
func embeddingReport(e tool.Entry) (m Model, ok bool, err error) {
	if e.TypeName != EmbeddingUsageType {
		return Model{}, false, nil
	}
	var r struct {
		Provider *string `json:"provider"`
		Model    *string `json:"model"`
	}
	if json.Unmarshal(e.JSON, &r) != nil || !reportName(r.Provider) || !reportName(r.Model) {
		return Model{}, true, fmt.Errorf(`usage report of type %q: want a JSON object whose "provider" and "model" are strings of 1 to %d bytes`,
			EmbeddingUsageType, MaxTypeNameBytes)
	}
	return Model{Name: *r.Model, Provider: *r.Provider}, true, nil
}

func reportName(s *string) bool { return s != nil && !isBlank(*s) && len(*s) <= MaxTypeNameBytes }
