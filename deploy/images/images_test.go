package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImages builds the three images from this checkout twice and checks what a
// container runtime would run: a non-root user, the labels, a static binary at the
// entrypoint that starts (its -h), the base files, a docker-loadable tarball with the
// same image, and the same digests from the same commit.
func TestImages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out := t.TempDir()
	var log bytes.Buffer
	if err := run(ctx, []string{"-out", out, "-version", "v0.0.0-test"}, &log); err != nil {
		t.Fatal(err)
	}
	t.Log(log.String())
	idx, err := layout.ImageIndexFromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(defaultImages) {
		t.Fatalf("the layout holds %d manifests, want %d", len(im.Manifests), len(defaultImages))
	}
	digests := map[string]v1.Hash{}
	for _, d := range im.Manifests {
		ref := d.Annotations["org.opencontainers.image.ref.name"]
		n := strings.TrimSuffix(strings.TrimPrefix(ref, "ghcr.io/toolmesh/"), ":v0.0.0-test")
		if n == ref || n == "" {
			t.Errorf("manifest %s has reference %q", d.Digest, ref)
			continue
		}
		digests[n] = d.Digest
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(n, func(t *testing.T) { checkImage(t, n, img) })

		tag, _ := name.NewTag(ref)
		fromTar, err := tarball.ImageFromPath(filepath.Join(out, n+".tar"), &tag)
		if err != nil {
			t.Errorf("%s.tar: %v", n, err)
			continue
		}
		// The tarball's manifest is docker's, so compare what it holds: the config.
		tc, _ := fromTar.ConfigName()
		lc, _ := img.ConfigName()
		if tc != lc {
			t.Errorf("%s.tar holds the config %s, the layout %s", n, tc, lc)
		}
	}

	// The same commit gives the same images.
	again := t.TempDir()
	if err := run(ctx, []string{"-out", again, "-version", "v0.0.0-test"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	idx2, err := layout.ImageIndexFromPath(filepath.Join(again, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	im2, _ := idx2.IndexManifest()
	for _, d := range im2.Manifests {
		ref := d.Annotations["org.opencontainers.image.ref.name"]
		n := strings.TrimSuffix(strings.TrimPrefix(ref, "ghcr.io/toolmesh/"), ":v0.0.0-test")
		if digests[n] != d.Digest {
			t.Errorf("%s: built twice from one commit, digests %s and %s", n, digests[n], d.Digest)
		}
	}
}

func checkImage(t *testing.T, n string, img v1.Image) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", c.User)
	}
	want := binDir + "/" + n
	if len(c.Entrypoint) != 1 || c.Entrypoint[0] != want {
		t.Errorf("entrypoint %q, want [%s]", c.Entrypoint, want)
	}
	for _, l := range []string{"version", "revision", "source", "created", "title"} {
		if c.Labels["org.opencontainers.image."+l] == "" {
			t.Errorf("no org.opencontainers.image.%s label: %v", l, c.Labels)
		}
	}
	if c.Labels["org.opencontainers.image.version"] != "v0.0.0-test" {
		t.Errorf("version label %q", c.Labels["org.opencontainers.image.version"])
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}

	files := map[string]*tar.Header{}
	var bin []byte
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files["/"+strings.TrimSuffix(h.Name, "/")] = h
			if "/"+h.Name == want {
				if bin, err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
		}
		_ = rc.Close()
	}
	for path, mode := range map[string]int64{want: 0o755, "/tmp": 0o1777, "/etc/passwd": 0o644, "/etc/ssl/certs/ca-certificates.crt": 0o644, "/home/nonroot": 0o700} {
		h := files[path]
		if h == nil {
			t.Errorf("no %s in the image", path)
			continue
		}
		if h.Mode&0o7777 != mode {
			t.Errorf("%s has mode %o, want %o", path, h.Mode&0o7777, mode)
		}
	}
	if h := files["/home/nonroot"]; h != nil && (h.Uid != nonroot || h.Gid != nonroot) {
		t.Errorf("/home/nonroot belongs to %d:%d", h.Uid, h.Gid)
	}
	if len(bin) == 0 {
		t.Fatalf("no binary at %s", want)
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("%s is not an ELF file: %v", want, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked: it would not start on the image's base", want)
		}
	}
	// The binary starts: its usage on -h, exit status 0.
	path := filepath.Join(t.TempDir(), n)
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "usage") {
		t.Errorf("%s -h: %v\n%s", n, err, out)
	}
}

func TestParse(t *testing.T) {
	for _, args := range [][]string{
		{},                           // no -out
		{"-out", "x", "-image", "a"}, // not name=pkg
		{"-out", "x", "-image", "a/b=./c"},
		{"-out", "x", "-platforms", "windows/amd64"},
		{"-out", "x", "-dir", "/nonexistent"},
		{"-out", "x", "-version", "not a tag"},
	} {
		if _, err := parse(args); err == nil {
			t.Errorf("parse(%q) = nil error", args)
		}
	}
	o, err := parse([]string{"-out", "x", "-image", "w=./cmd/toolworker", "-platforms", "linux/amd64,linux/arm64", "-version", "v1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.images) != 1 || o.images[0] != (image{"w", "./cmd/toolworker"}) || len(o.platforms) != 2 || o.version != "v1" {
		t.Errorf("parsed %+v", o)
	}
}

// TestDockerfile: the Dockerfile for users' own CI builds each image's package (it
// exists), from pinned base images, as the non-root user.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, im := range defaultImages {
		pkg := strings.SplitN(im, "=", 2)[1]
		if !strings.Contains(df, "--build-arg PKG="+pkg+" ") {
			t.Errorf("the Dockerfile does not show how to build %s", pkg)
		}
		if _, err := os.Stat(filepath.Join("..", "..", pkg, "main.go")); err != nil {
			t.Errorf("%s: %v", pkg, err)
		}
	}
	for _, line := range strings.Split(df, "\n") {
		if f, ok := strings.CutPrefix(line, "FROM "); ok {
			img := strings.Fields(f)[0]
			if !strings.Contains(img, ":") || strings.HasSuffix(img, ":latest") {
				t.Errorf("FROM %s is not pinned", img)
			}
		}
	}
	if !strings.Contains(df, "USER 65532:65532") || !strings.Contains(df, "CGO_ENABLED=0") {
		t.Error("the Dockerfile must build static binaries and run them as 65532")
	}
	if !strings.Contains(df, "-X "+versionSymbol+"=${VERSION}") {
		t.Error("the Dockerfile's binaries must report the image's version, as make images sets it")
	}
}

// TestImageIndex: more than one platform makes an image index with one image per
// platform, each holding a binary for its architecture.
func TestImageIndex(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out := t.TempDir()
	if err := run(ctx, []string{"-out", out, "-version", "v0.0.0-test", "-image", "toolmesh=./cmd/toolmesh", "-platforms", "linux/amd64,linux/arm64"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	root, err := layout.ImageIndexFromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	rm, err := root.IndexManifest()
	if err != nil || len(rm.Manifests) != 1 || !rm.Manifests[0].MediaType.IsIndex() {
		t.Fatalf("the layout holds %+v (%v), want one image index", rm, err)
	}
	idx, err := root.ImageIndex(rm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	if len(im.Manifests) != 2 {
		t.Fatalf("the index holds %d images, want 2", len(im.Manifests))
	}
	for _, d := range im.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" || machines[d.Platform.Architecture] == 0 {
			t.Errorf("image %s has platform %+v", d.Digest, d.Platform)
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, _ := img.ConfigFile()
		if cf.Architecture != d.Platform.Architecture {
			t.Errorf("%s image's config says %s", d.Platform.Architecture, cf.Architecture)
		}
		layers, _ := img.Layers()
		rc, err := layers[len(layers)-1].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		h, err := tr.Next()
		if err != nil {
			t.Fatal(err)
		}
		bin, _ := io.ReadAll(tr)
		_ = rc.Close()
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		if f.Machine != machines[d.Platform.Architecture] {
			t.Errorf("the %s image's %s is built for %v", d.Platform.Architecture, h.Name, f.Machine)
		}
	}
}

// TestCustomWorkerImage: a team's own worker — a program on pkg/worker in a module of its
// own — becomes an image the way the toolmesh images are made (-dir, -image,
// -repository): static, non-root, labelled, and its binary starts.
func TestCustomWorkerImage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/inventory\n\ngo 1.26\n\nrequire github.com/toolmesh/toolmesh v0.0.0\n\nreplace github.com/toolmesh/toolmesh => " + repo + "\n",
		"cmd/inventory-worker/main.go": `package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

type stockIn struct {
	SKU string ` + "`json:\"sku\" jsonschema:\"the article\"`" + `
}

func main() {
	fs := flag.NewFlagSet("inventory-worker", flag.ContinueOnError)
	orch := fs.String("orchestrator", "127.0.0.1:7070", "orchestrator address")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), "usage: inventory-worker [-orchestrator host:port]") }
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(map[bool]int{true: 0, false: 2}[err == flag.ErrHelp])
	}
	stock := tool.MustFunc("stock", "How many of an article are in stock", func(_ context.Context, in stockIn) (int, error) { return len(in.SKU), nil })
	w, err := worker.New(worker.Options{Orchestrator: *orch}, worker.Group{Role: "inventory", Description: "Inventory", Version: "1", Tools: []tool.Tool{stock}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`,
	}
	for p, text := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(mod, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mod, p), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"go", "mod", "tidy"}, {"git", "init", "-q"}, {"git", "add", "."},
		{"git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "inventory worker"}} {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir = mod
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	out := t.TempDir()
	if err := run(ctx, []string{"-dir", mod, "-image", "inventory-worker=./cmd/inventory-worker", "-repository", "registry.example.com/acme",
		"-source", "https://git.example.com/acme/inventory", "-out", out, "-version", "v0.0.0-test"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "registry.example.com/acme/inventory-worker:v0.0.0-test" {
		t.Fatalf("the layout holds %v", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, "inventory-worker", img)
	if cf, _ := img.ConfigFile(); cf.Config.Labels["org.opencontainers.image.source"] != "https://git.example.com/acme/inventory" {
		t.Errorf("source label %q", cf.Config.Labels["org.opencontainers.image.source"])
	}
}
