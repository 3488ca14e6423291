// Command images builds toolmesh's container images without a container daemon: each
// binary is compiled static (CGO_ENABLED=0, -trimpath) and packed with
// go-containerregistry onto a minimal base made here (no base image is pulled): a
// passwd and group file with the non-root user 65532 ("nonroot", as in distroless), the
// machine's CA bundle, and a writable /tmp. Each image runs as 65532:65532 and carries
// the OCI labels of its version, revision, source and creation time; the layers'
// timestamps are the commit's, so that the same commit gives the same layers.
//
// The images are written as one OCI image layout (-out/oci, each manifest annotated with
// its reference) and one docker-loadable tarball per image (-out/<name>.tar):
//
//	go run . -out ../../bin/images                        # orchestrator, toolworker, toolmesh
//	go run . -out ../../bin/images -platforms linux/amd64,linux/arm64
//	go run . -dir /src/my-worker -image my-worker=./cmd/my-worker -repository registry.example.com/acme
//
// -dir names the Go module to build from (default: the toolmesh checkout this program is
// in), so a team's own pkg/worker program becomes an image the same way.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// nonroot is the user and group the images run as.
const nonroot = 65532

// binDir is where each image keeps its binary.
const binDir = "/usr/local/bin"

// defaultImages are toolmesh's three images: name=package.
var defaultImages = []string{"orchestrator=./cmd/orchestrator", "toolworker=./cmd/toolworker", "toolmesh=./cmd/toolmesh"}

// ports each default image declares.
var ports = map[string][]string{"orchestrator": {"7070/tcp", "9464/tcp"}, "toolworker": {"7171/tcp", "9464/tcp"}}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

// options is what one build makes.
type options struct {
	dir        string  // the Go module to build from
	out        string  // the output directory
	images     []image // what to build
	platforms  []v1.Platform
	repository string // the references' repository prefix
	version    string
	revision   string
	created    time.Time
	source     string
	caFile     string
}

type image struct{ name, pkg string }

func parse(args []string) (options, error) {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	dir := fs.String("dir", "", "the Go module to build from (default: the toolmesh checkout)")
	out := fs.String("out", "", "output directory (required): oci/ and <name>.tar")
	var imgs multi
	fs.Var(&imgs, "image", "name=./package of an image to build, repeatable (default: orchestrator, toolworker, toolmesh)")
	platforms := fs.String("platforms", "linux/amd64", "comma-separated os/arch list; more than one makes an image index")
	repo := fs.String("repository", "ghcr.io/toolmesh", "the repository the references name")
	version := fs.String("version", "", "the images' tag and version label (default: git describe --tags --always --dirty)")
	source := fs.String("source", "https://github.com/toolmesh/toolmesh", "the org.opencontainers.image.source label")
	ca := fs.String("ca-file", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle the images trust (for HTTPS to model providers and MCP servers)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *out == "" {
		return options{}, errors.New("-out is required")
	}
	o := options{out: *out, repository: strings.TrimSuffix(*repo, "/"), source: *source, caFile: *ca}
	var err error
	if o.dir, err = moduleDir(*dir); err != nil {
		return o, err
	}
	if len(imgs) == 0 {
		imgs = defaultImages
	}
	for _, s := range imgs {
		n, pkg, ok := strings.Cut(s, "=")
		if !ok || n == "" || pkg == "" || strings.ContainsAny(n, "/: ") {
			return o, fmt.Errorf("-image %q: want name=./package", s)
		}
		o.images = append(o.images, image{n, pkg})
	}
	for _, p := range strings.Split(*platforms, ",") {
		os_, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || os_ != "linux" || arch == "" {
			return o, fmt.Errorf("-platforms: %q is not linux/<arch>", p)
		}
		o.platforms = append(o.platforms, v1.Platform{OS: os_, Architecture: arch})
	}
	o.version, o.revision, o.created = *version, "unknown", time.Unix(0, 0).UTC()
	if rev, err := git(o.dir, "rev-parse", "HEAD"); err == nil {
		o.revision = rev
	}
	if ts, err := git(o.dir, "log", "-1", "--format=%ct"); err == nil {
		if s, err := strconv.ParseInt(ts, 10, 64); err == nil {
			o.created = time.Unix(s, 0).UTC()
		}
	}
	if o.version == "" {
		if o.version, err = git(o.dir, "describe", "--tags", "--always", "--dirty"); err != nil {
			o.version = "dev"
		}
	}
	if _, err := name.NewTag(o.repository + "/x:" + o.version); err != nil {
		return o, fmt.Errorf("-repository %q with version %q is not a valid reference: %w", o.repository, o.version, err)
	}
	return o, nil
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

// moduleDir is dir, or the toolmesh module this program sits in (two levels up).
func moduleDir(dir string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(wd, "..", "..")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("%s is not a Go module: %w", dir, err)
	}
	return dir, nil
}

func git(dir string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	return strings.TrimSpace(string(out)), err
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "toolmesh-images-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	base, err := baseLayer(o)
	if err != nil {
		return err
	}
	ociDir := filepath.Join(o.out, "oci")
	if err := os.RemoveAll(ociDir); err != nil {
		return err
	}
	lp, err := layout.Write(ociDir, empty.Index)
	if err != nil {
		return err
	}
	for _, im := range o.images {
		ref, err := name.NewTag(o.repository + "/" + im.name + ":" + o.version)
		if err != nil {
			return err
		}
		var per []mutate.IndexAddendum
		for _, p := range o.platforms {
			bin := filepath.Join(work, im.name+"-"+p.Architecture)
			if err := build(ctx, o.dir, im.pkg, p, bin, o.version); err != nil {
				return fmt.Errorf("%s: %w", im.name, err)
			}
			img, err := imageOf(o, im, p, base, bin)
			if err != nil {
				return fmt.Errorf("%s: %w", im.name, err)
			}
			per = append(per, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
		}
		annotations := map[string]string{"org.opencontainers.image.ref.name": ref.String()}
		if len(per) == 1 {
			img := per[0].Add.(v1.Image)
			if err := lp.AppendImage(img, layout.WithAnnotations(annotations), layout.WithPlatform(*per[0].Descriptor.Platform)); err != nil {
				return err
			}
			if err := tarball.WriteToFile(filepath.Join(o.out, im.name+".tar"), ref, img); err != nil {
				return err
			}
			d, _ := img.Digest()
			fmt.Fprintf(stdout, "%s  %s  (%s)\n", ref, d, platformList(o.platforms))
			continue
		}
		idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, per...), types.OCIImageIndex)
		if err := lp.AppendIndex(idx, layout.WithAnnotations(annotations)); err != nil {
			return err
		}
		// A docker-loadable tarball holds one platform: the first.
		if err := tarball.WriteToFile(filepath.Join(o.out, im.name+".tar"), ref, per[0].Add.(v1.Image)); err != nil {
			return err
		}
		d, _ := idx.Digest()
		fmt.Fprintf(stdout, "%s  %s  (index: %s)\n", ref, d, platformList(o.platforms))
	}
	return nil
}

func platformList(ps []v1.Platform) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.OS+"/"+p.Architecture)
	}
	return strings.Join(s, ", ")
}

// versionSymbol is the variable toolmesh's binaries report their version from; a
// program of another module does not link it, and the linker ignores the setting.
const versionSymbol = "github.com/toolmesh/toolmesh/internal/cli.version"

// build compiles pkg of the module in dir for p, statically, into out, as version.
func build(ctx context.Context, dir, pkg string, p v1.Platform, out, version string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w -X "+versionSymbol+"="+version, "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS=-buildvcs=true")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// imageOf is base plus a layer holding bin as /usr/local/bin/<name>, with the config.
func imageOf(o options, im image, p v1.Platform, base v1.Layer, bin string) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	app, err := layerOf(o.created, []entry{{path: strings.TrimPrefix(binDir, "/") + "/" + im.name, mode: 0o755, data: data}})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), base, app)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = p.OS, p.Architecture, v1.Time{Time: o.created}
	cf.Config.User = fmt.Sprintf("%d:%d", nonroot, nonroot)
	cf.Config.Entrypoint = []string{binDir + "/" + im.name}
	cf.Config.WorkingDir = "/home/nonroot"
	cf.Config.Env = []string{"PATH=" + binDir + ":/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "HOME=/home/nonroot"}
	if ps := ports[im.name]; len(ps) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, port := range ps {
			cf.Config.ExposedPorts[port] = struct{}{}
		}
	}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    im.name,
		"org.opencontainers.image.version":  o.version,
		"org.opencontainers.image.revision": o.revision,
		"org.opencontainers.image.source":   o.source,
		"org.opencontainers.image.created":  o.created.Format(time.RFC3339),
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	return mutate.ConfigFile(img, cf)
}

// entry is one file or directory of a layer.
type entry struct {
	path     string // relative, no leading slash
	mode     int64
	data     []byte
	dir      bool
	uid, gid int
}

// baseLayer is what every image has under its binary: the users, the CA bundle, the
// non-root user's home and a world-writable /tmp.
func baseLayer(o options) (v1.Layer, error) {
	ca, err := os.ReadFile(o.caFile)
	if err != nil {
		return nil, fmt.Errorf("the CA bundle: %w (-ca-file; Debian's ca-certificates package has it)", err)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot, nonroot)
	group := fmt.Sprintf("root:x:0:\nnobody:x:65534:\nnonroot:x:%d:\n", nonroot)
	return layerOf(o.created, []entry{
		{path: "etc", mode: 0o755, dir: true},
		{path: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{path: "etc/group", mode: 0o644, data: []byte(group)},
		{path: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{path: "etc/ssl", mode: 0o755, dir: true},
		{path: "etc/ssl/certs", mode: 0o755, dir: true},
		{path: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca},
		{path: "home", mode: 0o755, dir: true},
		{path: "home/nonroot", mode: 0o700, dir: true, uid: nonroot, gid: nonroot},
		{path: "tmp", mode: 0o1777, dir: true},
		{path: "usr", mode: 0o755, dir: true},
		{path: "usr/local", mode: 0o755, dir: true},
		{path: "usr/local/bin", mode: 0o755, dir: true},
	})
}

// layerOf is a gzipped tar layer of es, every timestamp at t, in path order.
func layerOf(t time.Time, es []entry) (v1.Layer, error) {
	sort.Slice(es, func(i, j int) bool { return es[i].path < es[j].path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.path, Mode: e.mode, ModTime: t, Uid: e.uid, Gid: e.gid, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, e.path+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}
