// Command govectors prints the reference vectors of the Python SDK's tests, computed by
// Go itself: strconv.Quote, the canonical JSON of the content hash (encoding/json, as
// internal/wire does it), time.Duration.String, the ToolCallContext metadata keys,
// content hashes of tool definitions (as pkg/worker registers them) and the code points
// unicode.IsPrint accepts. It lives under testdata so that ./... leaves it out. From the
// repository's root:
//
//	go run ./sdk/python/tests/testdata/govectors | python3 sdk/python/tests/testdata/update_vectors.py
package main

import (
	"bytes"
	"context"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"
	"unicode"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// canonical is internal/wire.canonicalJSON, which is not importable from here.
func canonical(raw []byte) string {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return string(raw)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	return string(out)
}

type hashCase struct {
	Name         string            `json:"name"`
	Description  string            `json:"description"`
	Schema       string            `json:"input_schema_json"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	ReturnDirect bool              `json:"return_direct,omitempty"`
	Idempotent   bool              `json:"idempotent,omitempty"`
	TimeoutNS    int64             `json:"timeout_ns,omitempty"`
	Blackboard   []string          `json:"blackboard_types,omitempty"`
	Progress     bool              `json:"reports_progress,omitempty"`
	Receiver     string            `json:"receiver_type,omitempty"`
	Approval     bool              `json:"requires_approval,omitempty"`
	Once         *string           `json:"once_per_loop_advice,omitempty"`
	Hash         string            `json:"hash"`
}

func main() {
	out := map[string]any{}

	quotes := []string{"", "plain", "quote\"back\\slash", "nl\ncr\rtab\tbell\avt\vff\fbs\b", "nul\x00esc\x1bdel\x7f",
		"é ü 中文 😀", "\u00a0nbsp\u200bzwsp\u2028ls\u2029ps\ufeffbom", "\u00ad soft hyphen", "\U000e0001 tag", "\u0378 unassigned",
		"\U0001f600\U0001fae8 new emoji", "\u0600 arabic number sign", "<>&'"}
	var qv [][2]string
	for _, s := range quotes {
		qv = append(qv, [2]string{s, strconv.Quote(s)})
	}
	out["quote"] = qv

	jsons := []string{
		`{"type":"object"}`,
		`{ "b" : 1, "a" : [ 1.0, 1e5, -0, 2E-3, 1.50, 10000000000000000000000 ], "c": null, "d": true, "e": false }`,
		`{"html":"<a href=\"x\">&amp;</a>","ls":"\u2028\u2029","ctl":"\u0000\u0001\b\f\n\r\t\u001f\u007f","uni":"é中😀","esc":"\u00e9\ud83d\ude00"}`,
		`{"z":{"y":{"x":[{"b":2,"a":1}]}},"A":1,"a":2,"é":3,"Z":4,"_":5,"~":6,"":7}`,
		`{"dup":1,"dup":2}`,
		`{"lone":"\ud800x","lone2":"\udc00"}`,
		`  {"a":1}  `,
		`{"a":1} trailing`,
		`{"a":`,
		`not json`,
		`[1,2,{"b":1,"a":2}]`,
		`"str"`,
		`{"slash":"a/b\/c","u":"\u0041"}`,
	}
	var cv [][2]string
	for _, s := range jsons {
		cv = append(cv, [2]string{s, canonical([]byte(s))})
	}
	out["canonical"] = cv

	durs := []int64{0, 1, 999, 1000, 1500, 999999, 1000000, 1500000, 100000000, 1000000000, 1500000000, 60000000000, 90000000000,
		3600000000000, 7200000000000, 7261001000000, 86400000000000, 1234567890123, -1500000000, 5, 1001, 1000001, 59999999999, 3599999999999}
	var dv [][2]any
	for _, d := range durs {
		dv = append(dv, [2]any{d, time.Duration(d).String()})
	}
	out["duration"] = dv

	enc := base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)
	var kv [][2]string
	for _, k := range []string{"region", "tenant_id", "a", "ab", "abc", "abcd", "abcde", "é", "x-y.z", "😀 key"} {
		kv = append(kv, [2]string{k, "tm-ctx-" + enc.EncodeToString([]byte(k)) + "-bin"})
	}
	out["context_key"] = kv

	// Go's unicode.IsPrint as ranges of code points [lo, hi].
	var ranges [][2]int
	start := -1
	for r := 0; r <= unicode.MaxRune+1; r++ {
		p := r <= unicode.MaxRune && unicode.IsPrint(rune(r))
		if p && start < 0 {
			start = r
		}
		if !p && start >= 0 {
			ranges = append(ranges, [2]int{start, r - 1})
			start = -1
		}
	}
	out["isprint"] = ranges
	out["unicode_version"] = unicode.Version

	advice := "Use the result you have."
	empty := ""
	cases := []hashCase{
		{Name: "add", Description: "Add two numbers", Schema: `{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"],"additionalProperties":false}`, Idempotent: true},
		{Name: "weird", Description: "Tabs\tand \"quotes\" and\nnewlines, é, 中, 😀, \u2028, \x7f, <b>&amp;</b>",
			Schema:   `{"type":"object","properties":{"x":{"type":"number","default":1.0,"maximum":1e3,"description":"<x> & \u2028 é"}},"required":["x"]}`,
			Metadata: map[string]string{"b": "2", "a": "1", "é": "\n", "Z": "<>"}, ReturnDirect: true, TimeoutNS: 1500000000},
		{Name: "all_flags", Description: "d", Schema: `{"type":"object","properties":{}}`, Idempotent: true, TimeoutNS: 90000000000,
			Blackboard: []string{"Note", "crm.Customer"}, Progress: true, Receiver: "Cart", Approval: true, Once: &advice},
		{Name: "once_empty", Description: "", Schema: `{"type":"object"}`, Once: &empty, TimeoutNS: 100000000},
		{Name: "spaced", Description: "schema with spaces", Schema: "{ \"type\" : \"object\" ,\n \"properties\" : { \"n\" : { \"type\" : \"integer\" , \"enum\" : [ 1 , 2.50 , -0 ] } } }", TimeoutNS: 7200000000000},
	}
	var tools []tool.Tool
	for _, c := range cases {
		s, err := schema.FromJSON([]byte(c.Schema))
		if err != nil {
			panic(fmt.Sprint(c.Name, err))
		}
		var opts []tool.Option
		if c.ReturnDirect {
			opts = append(opts, tool.ReturnDirect())
		}
		if c.Idempotent {
			opts = append(opts, tool.Idempotent())
		}
		if c.TimeoutNS > 0 {
			opts = append(opts, tool.Timeout(time.Duration(c.TimeoutNS)))
		}
		if len(c.Blackboard) > 0 {
			opts = append(opts, tool.NeedsBlackboard(c.Blackboard...))
		}
		if c.Progress {
			opts = append(opts, tool.ReportsProgress())
		}
		if c.Receiver != "" {
			opts = append(opts, tool.MethodOf(c.Receiver))
		}
		if c.Approval {
			opts = append(opts, tool.RequiresApproval())
		}
		if c.Metadata != nil {
			opts = append(opts, tool.DefinitionMetadata(c.Metadata))
		}
		t := tool.New(c.Name, c.Description, s, func(context.Context, string) (tool.Result, error) { return tool.Text(""), nil }, opts...)
		if c.Once != nil {
			t = toolctx.OneShotPerLoop(t, *c.Once)
		}
		tools = append(tools, t)
	}
	w, err := worker.New(worker.Options{ID: "x", Orchestrator: "127.0.0.1:1"}, worker.Group{Role: "g", Tools: tools})
	if err != nil {
		panic(err)
	}
	hashes := map[string]string{}
	for _, rt := range w.Registration().GetGroups()[0].GetTools() {
		hashes[rt.GetDefinition().GetName()] = rt.GetContentHash()
	}
	for i := range cases {
		cases[i].Hash = hashes[cases[i].Name]
	}
	out["hash"] = cases

	enc2 := json.NewEncoder(os.Stdout)
	enc2.SetEscapeHTML(false)
	if err := enc2.Encode(out); err != nil {
		panic(err)
	}
}
