// Package logging builds the slog logger the binaries use: JSON or text, a level, and
// the correlation handler of internal/telemetry, which stamps every record logged with a
// context with its trace, span, run, loop and call ids (so no call site adds them, and
// no record carries a key twice). Durations are written as strings such as "1.5s".
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// New returns a logger writing to w at the given level ("debug", "info", "warn",
// "error") in the given format ("json" or "text").
func New(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	switch strings.ToLower(level) {
	case "debug":
		l = slog.LevelDebug
	case "info", "":
		l = slog.LevelInfo
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		return nil, fmt.Errorf("log level %q: must be debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: durationsAsStrings}
	var h slog.Handler
	switch format {
	case "json", "":
		h = slog.NewJSONHandler(w, opts)
	case "text":
		h = slog.NewTextHandler(w, opts)
	default:
		return nil, fmt.Errorf("log format %q: must be json or text", format)
	}
	return slog.New(telemetry.NewLogHandler(h)), nil
}

// durationsAsStrings writes a time.Duration as "1.5s" rather than as nanoseconds.
func durationsAsStrings(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}
