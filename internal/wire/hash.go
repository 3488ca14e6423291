package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strconv"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Hash is the content hash of a tool as it is registered: hex SHA-256 over a canonical
// encoding of the definition and metadata. Replicas serving the same tool produce the
// same hash; any change to what the model or the router sees changes it.
func Hash(def tool.Definition, meta tool.Metadata) string {
	var b bytes.Buffer
	field := func(name, value string) {
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(value))
		b.WriteByte('\n')
	}
	field("name", def.Name)
	field("description", def.Description)
	field("input_schema", canonicalJSON(def.InputSchema.JSON()))
	keys := make([]string, 0, len(def.Metadata))
	for k := range def.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		field("metadata."+k, def.Metadata[k])
	}
	field("return_direct", strconv.FormatBool(meta.ReturnDirect))
	field("idempotent", strconv.FormatBool(meta.Idempotent))
	field("timeout", meta.Timeout.String())
	for _, n := range meta.Needs {
		field("blackboard_type", n)
	}
	if meta.ReportsProgress { // only when set, so that older tools keep their hashes
		field("reports_progress", "true")
	}
	if meta.RequiresApproval {
		field("requires_approval", "true")
	}
	if meta.ReceiverType != "" {
		field("receiver_type", meta.ReceiverType)
	}
	if meta.OncePerLoop {
		field("once_per_loop", meta.OnceAdvice)
	}
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:])
}

// canonicalJSON re-encodes JSON with sorted object keys and no insignificant space, so
// that the same schema written two ways hashes the same. Invalid JSON is used as is.
func canonicalJSON(raw []byte) string {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return string(raw)
	}
	out, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return string(raw)
	}
	return string(out)
}
