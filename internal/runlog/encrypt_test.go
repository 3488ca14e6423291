package runlog_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/runlog/runlogtest"
)

var testKey = bytes.Repeat([]byte{7}, runlog.KeySize)

func encryptedOpener(path string, key []byte) runlogtest.Opener {
	open := sqliteOpener(path)
	return func(t *testing.T) runlog.Store {
		t.Helper()
		s, err := runlog.Encrypted(open(t), key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// The encrypted store is a store like the others: the whole conformance suite.
func TestEncryptedSQLite(t *testing.T) {
	runlogtest.Run(t, encryptedOpener(filepath.Join(t.TempDir(), "journal.db"), testKey))
}

// Sealed records leave no data in clear in the file; another key cannot read them; a
// sealed record moved to another place does not open; records written in clear before
// encryption was on are read as they are.
func TestEncryptionAtRest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const secret = "canary-4b1d9e-secret"

	plain := sqliteOpener(path)(t)
	if _, err := plain.Create(ctx, "old", "o", time.Minute, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: json.RawMessage(`{"before":"encryption"}`)}); err != nil {
		t.Fatal(err)
	}
	_ = plain.Close()

	s := encryptedOpener(path, testKey)(t)
	l, err := s.Create(ctx, "r", "o", time.Minute, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: json.RawMessage(`{"token":"` + secret + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, l, []runlog.Record{{Seq: 2, Kind: runlog.KindEvent, Data: json.RawMessage(`{"e":"` + secret + `"}`)}}); err != nil {
		t.Fatal(err)
	}
	// Another run whose records are sealed in the same places: its row moved onto r's
	// must not open there.
	if _, err := s.Create(ctx, "r2", "o", time.Minute, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: json.RawMessage(`{"token":"other"}`)}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.Read(ctx, "r", 0, 0)
	if err != nil || len(recs) != 2 || !strings.Contains(string(recs[0].Data), secret) {
		t.Fatalf("Read = %v, %v", recs, err)
	}
	if recs, err := s.Read(ctx, "old", 0, 0); err != nil || string(recs[0].Data) != `{"before":"encryption"}` {
		t.Errorf("a record written in clear: %v, %v", recs, err)
	}
	_ = s.Close()
	for _, f := range []string{path, path + "-wal"} {
		b, _ := os.ReadFile(f)
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the secret in clear", filepath.Base(f))
		}
	}

	other, err := runlog.Encrypted(sqliteOpener(path)(t), bytes.Repeat([]byte{8}, runlog.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Read(ctx, "r", 0, 0); err == nil || !strings.Contains(err.Error(), "sealed under key") {
		t.Errorf("another key read the journal: %v", err)
	}
	_ = other.Close()

	// Move r2's sealed row onto r's first: it must not open there.
	db := runlogtest.RawSQLite(t, path)
	if _, err := db.Exec(`UPDATE toolmesh_records SET data = (SELECT data FROM toolmesh_records WHERE run_id = 'r2' AND seq = 1),
		n = (SELECT n FROM toolmesh_records WHERE run_id = 'r2' AND seq = 1) WHERE run_id = 'r' AND seq = 1`); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	s = encryptedOpener(path, testKey)(t)
	defer func() { _ = s.Close() }()
	if _, err := s.Read(ctx, "r", 0, 0); err == nil || !strings.Contains(err.Error(), "altered or moved") {
		t.Errorf("a moved record opened: %v", err)
	}
	if _, err := runlog.Encrypted(s, []byte("short")); err == nil {
		t.Error("a short key was taken")
	}
}

func TestReadKey(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"raw": string(testKey), "hex": hex.EncodeToString(testKey) + "\n", "base64": "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n",
	} {
		p := filepath.Join(dir, name)
		_ = os.WriteFile(p, []byte(content), 0o600)
		if k, err := runlog.ReadKey(p); err != nil || !bytes.Equal(k, testKey) {
			t.Errorf("%s: %x, %v", name, k, err)
		}
	}
	p := filepath.Join(dir, "bad")
	_ = os.WriteFile(p, []byte("not a key"), 0o600)
	if _, err := runlog.ReadKey(p); err == nil || !strings.Contains(err.Error(), "holds no 32-byte key") {
		t.Errorf("a bad key file: %v", err)
	}
	if _, err := runlog.ReadKey(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing key file: %v", err)
	}
}
