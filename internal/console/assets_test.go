package console

import (
	"bytes"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// TestPageRunsNoInlineCode: the page's Content-Security-Policy refuses inline scripts and
// styles, so index.html must have none: no <style>, no style or on* attribute, no script
// without a src, and nothing loaded from another origin.
func TestPageRunsNoInlineCode(t *testing.T) {
	doc, err := html.Parse(bytes.NewReader(embedded(t, "index.html")))
	if err != nil {
		t.Fatal(err)
	}
	scripts := 0
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode {
			continue
		}
		attrs := map[string]string{}
		for _, a := range n.Attr {
			attrs[a.Key] = a.Val
			if a.Key == "style" || strings.HasPrefix(a.Key, "on") {
				t.Errorf("<%s %s=...>: an inline %s", n.Data, a.Key, a.Key)
			}
			if (a.Key == "src" || a.Key == "href") && strings.Contains(a.Val, "//") {
				t.Errorf("<%s %s=%q>: from another origin", n.Data, a.Key, a.Val)
			}
		}
		switch n.Data {
		case "style":
			t.Error("a <style> element")
		case "script":
			scripts++
			if attrs["src"] == "" || n.FirstChild != nil {
				t.Error("an inline <script>")
			}
			if attrs["type"] != "module" {
				t.Errorf("<script src=%q> is not a module", attrs["src"])
			}
		}
	}
	if scripts != 1 {
		t.Errorf("%d scripts, want app.js alone", scripts)
	}
}

// TestScriptsHygiene holds the page's scripts to the rules they are written by: each is
// type-checked (// @ts-check), imports only files of its own that exist, and never turns
// text into markup or code.
func TestScriptsHygiene(t *testing.T) {
	imports := regexp.MustCompile(`(?m)^\s*(?:import|export)\s[^;]*?from\s+"([^"]+)"`)
	forbidden := regexp.MustCompile(`\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function\(|\.style\.|setAttribute\("style"`)
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".js" {
			return err
		}
		src, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(p, "assets/")
		if !bytes.HasPrefix(src, []byte("// @ts-check\n")) {
			t.Errorf("%s does not start with // @ts-check", name)
		}
		if strings.HasSuffix(name, ".test.js") || strings.HasSuffix(name, ".test.mjs") {
			t.Errorf("%s: a test among the assets", name)
		}
		for _, m := range imports.FindAllSubmatch(src, -1) {
			spec := string(m[1])
			if !strings.HasPrefix(spec, "./") {
				t.Errorf("%s imports %q: not a file of the console", name, spec)
				continue
			}
			if _, err := fs.Stat(assets, path.Join(path.Dir(p), spec)); err != nil {
				t.Errorf("%s imports %q, which is not embedded", name, spec)
			}
		}
		if m := forbidden.Find(src); m != nil {
			t.Errorf("%s uses %s", name, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
