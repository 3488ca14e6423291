// Package readme reads the code blocks of the repository's README, so that tests can
// build its Go programs and load its scripts as a reader would copy them.
//
// It imports only the standard library.
package readme

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Block is one fenced code block.
type Block struct {
	// Lang is the word after the opening fence ("go", "yaml", "sh").
	Lang string
	// Line is the line of the opening fence, from 1.
	Line int
	Text string
}

// Root is the repository's root: the nearest directory at or above the working directory
// that holds go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod at or above %s", dir)
		}
		dir = parent
	}
}

// Blocks returns the fenced code blocks of the README at the repository's root.
func Blocks() ([]Block, error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(root, "README.md"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var (
		out  []Block
		cur  *Block
		text strings.Builder
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &Block{Lang: strings.TrimSpace(strings.TrimPrefix(line, "```")), Line: n}
			text.Reset()
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.Text = text.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			text.WriteString(line)
			text.WriteByte('\n')
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("README.md:%d: code block not closed", cur.Line)
	}
	return out, sc.Err()
}

// Of returns the blocks in language lang.
func Of(lang string) ([]Block, error) {
	all, err := Blocks()
	if err != nil {
		return nil, err
	}
	var out []Block
	for _, b := range all {
		if b.Lang == lang {
			out = append(out, b)
		}
	}
	return out, nil
}
