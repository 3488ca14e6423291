package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The journal's flags override the config file before it is checked, so they may supply
// what the file's settings require, as the error for the file alone says. Before, the
// file was checked first and refused for the key the flag would have set.
func TestFlagsCompleteTheConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sqlite := write("sqlite.yaml", "journal: {driver: sqlite}\n")
	postgres := write("postgres.yaml", "journal: {driver: postgres}\n")
	data := filepath.Join(dir, "data")

	cfg, _, err := load([]string{"-config", sqlite, "-data-dir", data, "-listen", "127.0.0.1:0"})
	if err != nil || cfg.Journal.DataDir != data || cfg.Listen != "127.0.0.1:0" {
		t.Errorf("sqlite file with -data-dir: %v (data_dir %q)", err, cfg.Journal.DataDir)
	}
	cfg, _, err = load([]string{"-config", postgres, "-journal-dsn", "postgres://u@localhost/db"})
	if err != nil || cfg.Journal.DSN != "postgres://u@localhost/db" {
		t.Errorf("postgres file with -journal-dsn: %v", err)
	}
	if _, _, err := load([]string{"-config", sqlite}); err == nil || !strings.Contains(err.Error(), "journal.data_dir") {
		t.Errorf("sqlite file without -data-dir: %v; want journal.data_dir required", err)
	}
	if _, _, err := load([]string{"-journal", "sqlite"}); err == nil || !strings.Contains(err.Error(), "journal.data_dir") {
		t.Errorf("-journal sqlite alone: %v; want journal.data_dir required", err)
	}
	cfg, _, err = load([]string{"-journal", "sqlite", "-data-dir", data})
	if err != nil || cfg.Journal.Driver != "sqlite" {
		t.Errorf("-journal sqlite -data-dir: %v", err)
	}
}
