package llmtest_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/llm/llmtest"
)

func TestCheckLogLines(t *testing.T) {
	rules := llmtest.LogRules{Counts: []string{"attempt"}, Durations: []string{"wait"}}
	for _, tc := range []struct {
		name, log, fault string
	}{
		{"fine", `{"msg":"m","attempt":2,"wait":"1.5s","g":{"a":"x"},"l":[{"b":"y"}]}` + "\n\n" + `{"msg":"n"}`, ""},
		{"key twice", `{"provider":"p","msg":"m","provider":"p"}`, `key "provider" appears twice`},
		{"key twice in a group", `{"g":{"a":"x","a":"y"}}`, `key "a" appears twice`},
		{"same key in two groups", `{"g":{"attempt":1},"h":{"attempt":1}}`, ""},
		{"duration as a number", `{"wait":1500000000}`, `"wait" is 1500000000, not a duration as text`},
		{"number under another key", `{"duration":1500000000}`, `"duration" is the number 1500000000`},
		{"number in a list", `{"l":[1]}`, `"l" is the number 1`},
		{"duration not a duration", `{"wait":"soon"}`, `"wait" is soon, not a duration as text`},
		{"not an object", `["wait"]`, "not an object"},
		{"two values", `{"a":"b"} {"c":"d"}`, "more than one value"},
		{"not JSON", `{"a":`, "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, err := llmtest.CheckLogLines([]byte(tc.log), rules)
			switch {
			case tc.fault == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.fault != "" && (err == nil || !strings.Contains(err.Error(), tc.fault)):
				t.Errorf("error %v, want one saying %q", err, tc.fault)
			case tc.fault == "" && len(lines) != strings.Count(strings.TrimSpace(tc.log), "\n\n")+1:
				t.Errorf("%d lines", len(lines))
			}
		})
	}
}

// TestCheckLogLinesOnSlog: the checker catches what slog's JSON handler writes for a
// time.Duration and for a key given twice.
func TestCheckLogLinesOnSlog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("m", "attempt", 1, "wait", (250 * time.Millisecond).String())
	if _, err := llmtest.CheckLogLines(buf.Bytes(), llmtest.RetryLogRules); err != nil {
		t.Errorf("a well-formed line: %v", err)
	}
	for name, write := range map[string]func(*slog.Logger){
		"raw duration": func(l *slog.Logger) { l.Info("m", "wait", 250*time.Millisecond) },
		"key twice":    func(l *slog.Logger) { l.With("provider", "p").Info("m", "provider", "p") },
	} {
		buf.Reset()
		write(log)
		if _, err := llmtest.CheckLogLines(buf.Bytes(), llmtest.RetryLogRules); err == nil {
			t.Errorf("%s: no fault found in %s", name, buf.Bytes())
		}
	}
}
