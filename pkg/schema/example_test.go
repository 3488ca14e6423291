package schema_test

import (
	"fmt"

	"github.com/toolmesh/toolmesh/pkg/schema"
)

// A schema built from parameters renders as the model sees it, and validates the
// arguments a model produced before the call is dispatched: canonical JSON out, or an
// error the model can act on.
func ExampleParams() {
	s := schema.Params(
		schema.String("city", "City name"),
		schema.Integer("days", "Days of forecast").AsOptional(),
		schema.String("units", "").WithEnum("metric", "imperial").AsOptional(),
	)
	fmt.Println(s)
	canonical, err := s.Validate(`{"units":"metric", "city":"Oslo"}`)
	fmt.Println(canonical, err)
	_, err = s.Validate(`{"city":"Oslo","days":"two"}`)
	fmt.Println(err)
	// Output:
	// {"type":"object","properties":{"city":{"type":"string","description":"City name"},"days":{"type":"integer","description":"Days of forecast"},"units":{"type":"string","description":"units","enum":["metric","imperial"]}},"required":["city"]}
	// {"city":"Oslo","units":"metric"} <nil>
	// invalid arguments: property "days": expected integer, got string
}

// A schema from an author's JSON is checked once; references outside it are refused,
// so registering a tool never makes the orchestrator fetch anything.
func ExampleFromJSON() {
	_, err := schema.FromJSON([]byte(`{"type":"object","properties":{"a":{"$ref":"https://example.com/a.json"}}}`))
	fmt.Println(err)
	// Output:
	// invalid input schema: $ref "https://example.com/a.json" points outside the schema; only references within it are allowed
}
