package router

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/toolmesh/toolmesh/internal/config"
)

// Quarantine decides which new tool definitions wait for an operator's approval, and
// which the operator approved (registry.quarantine, registry.approved_definitions and
// registry.approved_definitions_file, which Watch reads again when it changes). Its Hold
// and Approved are Options.Quarantine and Options.Approved.
type Quarantine struct {
	maxDescription int
	patterns       []*regexp.Regexp
	inline         map[string]bool
	file           string
	log            *slog.Logger

	listed atomic.Pointer[map[string]bool] // the file's hashes, as last loaded
	mu     sync.Mutex                      // serialises loads
	last   []byte                          // the file's content, as last loaded
}

// maxApprovalsBytes bounds the approvals file.
const maxApprovalsBytes = 4 << 20

// NewQuarantine builds the quarantine of a validated registry config; the approvals
// file must be readable.
func NewQuarantine(cfg config.Registry, log *slog.Logger) (*Quarantine, error) {
	if log == nil {
		log = slog.Default()
	}
	q := &Quarantine{maxDescription: cfg.Quarantine.DescriptionBytes, inline: map[string]bool{}, file: cfg.ApprovedDefinitionsFile, log: log}
	for _, p := range cfg.Quarantine.QuarantinePatterns() {
		re, err := regexp.Compile("(?i)" + p)
		if err != nil {
			return nil, fmt.Errorf("registry.quarantine.patterns: %w", err)
		}
		q.patterns = append(q.patterns, re)
	}
	for _, h := range cfg.ApprovedDefinitions {
		q.inline[h] = true
	}
	if q.file != "" {
		if err := q.load(); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// Hold says why text waits for an operator's approval; "" when it need not. The cap
// applies to each piece of prose (a description, usage notes); the patterns to all of
// it, once invisible characters (Unicode's format characters: zero-width spaces and
// joiners, soft hyphens, bidirectional marks) are taken out, since the model reads
// through them.
func (q *Quarantine) Hold(t ModelText) string {
	for _, p := range []struct{ what, text string }{{"description", t.Description}, {"usage notes", t.UsageNotes}} {
		if q.maxDescription > 0 && len(p.text) > q.maxDescription {
			return fmt.Sprintf("its %s are %d bytes, over registry.quarantine.description_bytes (%d)", p.what, len(p.text), q.maxDescription)
		}
	}
	for _, re := range q.patterns {
		for _, text := range []string{t.Description, t.UsageNotes, t.Schema} {
			if m := re.FindString(visible(text)); m != "" {
				if len(m) > 80 {
					m = m[:80] + "…"
				}
				return fmt.Sprintf("its text reads like an instruction to the model (%q matches registry.quarantine.patterns)", m)
			}
		}
	}
	return ""
}

// visible is s without Unicode's format characters (category Cf).
func visible(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return unicode.Is(unicode.Cf, r) }) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, s)
}

// Approved reports whether an operator approved the definition of hash. It reads what
// Watch loaded last: the router asks under its lock, which a slow file system must not
// hold.
func (q *Quarantine) Approved(hash string) bool {
	if q.inline[hash] {
		return true
	}
	listed := q.listed.Load()
	return listed != nil && (*listed)[hash]
}

// Watch reads the approvals file again every interval while it changes (its content
// compared, so that one hash swapped for another of the same length within a second is
// seen), until ctx ends; nothing to do without a file.
func (q *Quarantine) Watch(ctx context.Context, interval time.Duration) {
	if q.file == "" {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := q.load(); err != nil {
			q.log.Warn("the approved definitions file cannot be read; keeping the hashes it had", "file", q.file, "error", err.Error())
		}
	}
}

// load reads the approvals file: one hash a line, blank lines and what follows a #
// ignored. A line that is not a hash fails the whole file, which keeps what it had.
func (q *Quarantine) load() error {
	fi, err := os.Stat(q.file)
	if err != nil {
		return fmt.Errorf("registry.approved_definitions_file: %w", err)
	}
	if fi.Size() > maxApprovalsBytes {
		return fmt.Errorf("registry.approved_definitions_file: %s is %d bytes; the limit is %d", q.file, fi.Size(), maxApprovalsBytes)
	}
	b, err := os.ReadFile(q.file)
	if err != nil {
		return fmt.Errorf("registry.approved_definitions_file: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.last != nil && bytes.Equal(b, q.last) {
		return nil
	}
	listed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if !config.ContentHash(line) {
			return fmt.Errorf("registry.approved_definitions_file %s, line %d: %q is not a content hash (64 hex digits)", q.file, n, line)
		}
		listed[line] = true
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("registry.approved_definitions_file %s: %w", q.file, err)
	}
	q.listed.Store(&listed)
	q.last = b
	return nil
}
