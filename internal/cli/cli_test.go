package cli_test

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/cli"
)

func TestParse(t *testing.T) {
	tests := []struct {
		args           []string
		help           bool
		stdout, stderr string // substrings; "" means the stream stays empty
	}{
		{args: []string{"-h"}, help: true, stdout: "usage: demo"},
		{args: []string{"--help"}, help: true, stdout: "usage: demo"},
		{args: []string{"-help"}, help: true, stdout: "usage: demo"},
		{args: []string{"-n", "3", "rest"}},
		{args: []string{"-nope"}, stderr: "flag provided but not defined: -nope"},
		{args: []string{"-n", "x"}, stderr: "usage: demo"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("demo", flag.ContinueOnError)
			n := fs.Int("n", 0, "a number")
			fs.Usage = func() {
				_, _ = fs.Output().Write([]byte("usage: demo [-n N]\n"))
				fs.PrintDefaults()
			}
			var stdout, stderr bytes.Buffer
			err := cli.Parse(fs, tt.args, &stdout, &stderr)
			if got := cli.IsHelp(err); got != tt.help {
				t.Errorf("IsHelp(%v) = %v, want %v", err, got, tt.help)
			}
			if (err == nil) != (tt.stderr == "" && !tt.help) {
				t.Errorf("Parse = %v", err)
			}
			for name, c := range map[string]struct {
				got  string
				want string
			}{"stdout": {stdout.String(), tt.stdout}, "stderr": {stderr.String(), tt.stderr}} {
				if (c.want == "" && c.got != "") || !strings.Contains(c.got, c.want) {
					t.Errorf("%s = %q, want it to contain %q", name, c.got, c.want)
				}
			}
			if err == nil && (*n != 3 || fs.Arg(0) != "rest") {
				t.Errorf("parsed -n %d and %q", *n, fs.Args())
			}
			if fs.Output() != &stderr {
				t.Error("after Parse the flag set does not write to stderr")
			}
		})
	}
}
