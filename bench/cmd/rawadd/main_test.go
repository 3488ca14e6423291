package main

import (
	"testing"

	"github.com/toolmesh/toolmesh/internal/cli"
)

// TestHelpIsNotAnError: -h prints the usage and ends well (the main exits 0).
func TestHelpIsNotAnError(t *testing.T) {
	if err := run([]string{"-h"}); !cli.IsHelp(err) {
		t.Errorf("run(-h) = %v, want the help error main exits 0 on", err)
	}
}
