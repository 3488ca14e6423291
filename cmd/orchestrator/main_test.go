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

// A value a flag set that the configuration refuses is reported as the flag's; one the
// file set, as the file's. Both used to be reported against the file, naming it even when
// every refused value came from a flag.
func TestRefusedFlagsAreNamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("log: {level: loud}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fine := filepath.Join(t.TempDir(), "fine.yaml")
	if err := os.WriteFile(fine, []byte("log: {level: info}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args           []string
		want, unwanted []string
	}{
		{[]string{"-config", path, "-log-format", "xml"},
			[]string{"config " + path + " with --log-format: ", `log.level: must be one of`, `log.format (from --log-format): must be json or text; got "xml"`}, nil},
		// A key required, or refused, because of a flag's value is not the flag's own:
		// the file is named, and the flags set over it.
		{[]string{"-config", fine, "-journal", "sqlite"},
			[]string{"config " + fine + " with --journal: ", "journal.data_dir: "}, nil},
		{[]string{"-config", fine, "-listen", "0.0.0.0:7070", "-log-level", "debug"},
			[]string{"config " + fine + " with --listen, --log-level: ", "tls: listen 0.0.0.0:7070 is not a loopback address"}, nil},
		{[]string{"-config", path, "-log-level", "quiet"},
			[]string{`log.level (from --log-level): must be one of debug, info, warn, error; got "quiet"`}, []string{path, "loud"}},
		{[]string{"-journal", "sqlite", "-listen", "nowhere"},
			[]string{"journal.data_dir: ", "listen (from --listen): address nowhere"}, []string{"config "}},
	} {
		_, _, err := load(c.args)
		if err == nil {
			t.Errorf("%v: loaded; want refused", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v\nwant it to say %q", c.args, err, w)
			}
		}
		for _, n := range c.unwanted {
			if strings.Contains(err.Error(), n) {
				t.Errorf("%v: %v\nwant it not to say %q", c.args, err, n)
			}
		}
	}
}
