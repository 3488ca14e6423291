// Package cli holds what the toolmesh binaries share around their command lines: flag
// parsing where asking for help is not an error, the mutual-TLS flags, the bearer token
// file, and the bounded flush of telemetry on the way out. Only main packages import
// it; it imports no toolmesh package but pkg/otelsetup and pkg/trust.
package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"time"

	"github.com/toolmesh/toolmesh/pkg/otelsetup"
)

// Parse parses args into fs, whose ErrorHandling must be flag.ContinueOnError. Asking for
// help (-h, -help, --help) prints the usage to stdout and returns flag.ErrHelp, which a
// main ends on with exit status 0 (IsHelp); any other mistake prints the error and the
// usage to stderr and returns the error. fs.Usage, when set, must write to fs.Output().
// After Parse, fs writes to stderr.
func Parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	out := stderr
	if IsHelp(err) {
		out = stdout
	}
	if _, werr := out.Write(buf.Bytes()); werr != nil && err == nil {
		err = werr
	}
	return err
}

// IsHelp reports whether err says that help was asked for, and printed: the command
// did what was asked and exits 0.
func IsHelp(err error) bool { return errors.Is(err, flag.ErrHelp) }

// FlushTelemetry shuts p down, waiting at most timeout for the exporters: an unreachable
// collector must not hold the process up longer. The error says what was not exported.
func FlushTelemetry(p *otelsetup.Providers, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return p.Shutdown(ctx)
}
