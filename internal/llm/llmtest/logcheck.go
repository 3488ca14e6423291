package llmtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"
)

// LogRules say what the values of a log line may be. Numbers stand only under the keys
// of Counts: a number under any other key is taken for a duration logged as
// nanoseconds, which must be logged as text instead, such as "1.5s". The values under
// the keys of Durations are such text, as time.ParseDuration reads it.
type LogRules struct {
	Counts, Durations []string
}

// CheckLogLines decodes the JSON lines of a slog.JSONHandler, one object a line, and
// checks them: no object (a group's included) has a key twice, and every value keeps to
// rules. It returns the lines decoded, numbers as json.Number.
func CheckLogLines(data []byte, rules LogRules) ([]map[string]any, error) {
	var lines []map[string]any
	for i, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		v, err := rules.value(dec, "")
		if err == nil {
			if _, after := dec.Token(); after != io.EOF {
				err = errors.New("more than one value")
			}
		}
		obj, ok := v.(map[string]any)
		if err == nil && !ok {
			err = errors.New("not an object")
		}
		if err != nil {
			return nil, fmt.Errorf("log line %d: %w: %s", i+1, err, line)
		}
		lines = append(lines, obj)
	}
	return lines, nil
}

// value reads the next value of dec, which stands under key.
func (r LogRules) value(dec *json.Decoder, key string) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		return r.object(dec)
	case json.Delim('['):
		var list []any
		for dec.More() {
			e, err := r.value(dec, key)
			if err != nil {
				return nil, err
			}
			list = append(list, e)
		}
		_, err := dec.Token()
		return list, err
	}
	if slices.Contains(r.Durations, key) {
		s, ok := tok.(string)
		if _, err := time.ParseDuration(s); !ok || err != nil {
			return nil, fmt.Errorf("%q is %v, not a duration as text", key, tok)
		}
	}
	if n, ok := tok.(json.Number); ok && !slices.Contains(r.Counts, key) {
		return nil, fmt.Errorf("%q is the number %s: a duration must be logged as text", key, n)
	}
	return tok, nil
}

// object reads the rest of an object of dec, whose '{' was read.
func (r LogRules) object(dec *json.Decoder) (map[string]any, error) {
	obj := map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := tok.(string)
		if _, dup := obj[k]; dup {
			return nil, fmt.Errorf("key %q appears twice", k)
		}
		if obj[k], err = r.value(dec, k); err != nil {
			return nil, err
		}
	}
	_, err := dec.Token()
	return obj, err
}

// RetryLogRules are the rules of the lines llm.StreamWithRetries logs: the attempt and
// the HTTP status are counts, the wait and the duration of an attempt durations.
var RetryLogRules = LogRules{Counts: []string{"attempt", "status"}, Durations: []string{"wait", "duration"}}

// CheckProviderLog checks the JSON lines a provider logged with RetryLogRules, and that
// each names the provider under "provider"; it returns the lines, failing the test at
// the first fault.
func CheckProviderLog(t testing.TB, data []byte, provider string) []map[string]any {
	t.Helper()
	lines, err := CheckLogLines(data, RetryLogRules)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if l["provider"] != provider {
			t.Fatalf("log line %v: provider = %v, want %q", l, l["provider"], provider)
		}
	}
	return lines
}

// Stable returns lines without what changes from run to run: the time is dropped and
// each duration (of RetryLogRules) becomes "(duration)".
func Stable(lines []map[string]any) []map[string]any {
	out := make([]map[string]any, len(lines))
	for i, l := range lines {
		out[i] = make(map[string]any, len(l))
		for k, v := range l {
			switch {
			case k == "time":
			case slices.Contains(RetryLogRules.Durations, k):
				out[i][k] = "(duration)"
			default:
				out[i][k] = v
			}
		}
	}
	return out
}
