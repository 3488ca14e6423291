package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

// profileSummary is what a CPU profile of the benchmark process says about one variant
// run at full concurrency.
type profileSummary struct {
	Variant string `json:"variant"`
	// Goal names the variant whose missed goal the profile explains.
	Goal    string  `json:"for_variant"`
	Path    string  `json:"path"`
	Seconds float64 `json:"seconds"`
	Calls   int64   `json:"calls"`
	// Buckets split the sampled CPU (flat) by the code it was spent in.
	Buckets []share `json:"buckets,omitempty"`
	// TopFlat are the functions with the most CPU of their own.
	TopFlat []share `json:"top_flat,omitempty"`
	// TopToolmesh are toolmesh's functions by CPU including their callees.
	TopToolmesh []share `json:"top_toolmesh_cum,omitempty"`
	Note        string  `json:"note,omitempty"`
}

type share struct {
	Name    string  `json:"name"`
	Percent float64 `json:"percent"`
}

// profileVariant records a CPU profile of this process while v runs at the throughput
// phase's concurrency for d, and summarises it with go tool pprof when the go command
// is there.
func profileVariant(ctx context.Context, v *variant, cfg Config, d time.Duration) (*profileSummary, error) {
	dir := cfg.ProfileDir
	if dir == "" {
		dir = os.TempDir()
	}
	path, _ := filepath.Abs(filepath.Join(dir, "cpu-"+strings.NewReplacer("+", "-", "/", "-", " ", "-", "(", "", ")", "").Replace(v.name)+".pprof.tmp"))
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	if err := pprof.StartCPUProfile(f); err != nil {
		return &profileSummary{Variant: v.name, Note: "not profiled: " + err.Error()}, nil
	}
	th, runErr := measureThroughput(ctx, v.call, cfg.Concurrency, d, cfg.ThroughputCalls)
	pprof.StopCPUProfile()
	if runErr != nil {
		return nil, runErr
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	s := &profileSummary{Variant: v.name, Path: path, Seconds: d.Seconds(), Calls: th.Calls}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, path); err == nil && !strings.HasPrefix(rel, "..") {
			s.Path = rel
		}
	}
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=100000", path).Output()
	if err != nil {
		s.Note = fmt.Sprintf("go tool pprof -top %s failed: %v", path, err)
		return s, nil
	}
	summarise(s, out)
	return s, nil
}

// node is one line of go tool pprof -top.
type node struct {
	name      string
	flat, cum float64 // percent of the samples
}

// summarise fills the summary from the -top text output.
func summarise(s *profileSummary, top []byte) {
	var nodes []node
	header := false
	for line := range bytes.Lines(top) {
		f := strings.Fields(string(line))
		if len(f) >= 2 && f[0] == "flat" && f[1] == "flat%" {
			header = true
			continue
		}
		if !header || len(f) < 6 {
			continue
		}
		flat, err1 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		cum, err2 := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		nodes = append(nodes, node{name: shortName(strings.Join(f[5:], " ")), flat: flat, cum: cum})
	}
	if len(nodes) == 0 {
		s.Note = "the profile has no samples"
		return
	}
	buckets := map[string]float64{}
	for _, n := range nodes {
		buckets[bucketOf(n.name)] += n.flat
	}
	for name, p := range buckets {
		s.Buckets = append(s.Buckets, share{name, round1(p)})
	}
	slices.SortFunc(s.Buckets, func(a, b share) int { return cmpDesc(a.Percent, b.Percent) })
	slices.SortFunc(nodes, func(a, b node) int { return cmpDesc(a.flat, b.flat) })
	for _, n := range nodes[:min(12, len(nodes))] {
		s.TopFlat = append(s.TopFlat, share{n.name, round1(n.flat)})
	}
	slices.SortFunc(nodes, func(a, b node) int { return cmpDesc(a.cum, b.cum) })
	for _, n := range nodes {
		if strings.HasPrefix(n.name, "github.com/toolmesh/toolmesh/") && !strings.Contains(n.name, "/bench.") {
			s.TopToolmesh = append(s.TopToolmesh, share{strings.TrimPrefix(n.name, "github.com/toolmesh/toolmesh/"), round1(n.cum)})
			if len(s.TopToolmesh) == 30 {
				break
			}
		}
	}
}

// bucketOf names the kind of code a function belongs to.
func bucketOf(fn string) string {
	switch {
	case strings.HasPrefix(fn, "github.com/toolmesh/toolmesh/bench"):
		return "benchmark harness"
	case strings.HasPrefix(fn, "github.com/toolmesh/toolmesh/"):
		return "toolmesh"
	case strings.HasPrefix(fn, "google.golang.org/grpc"):
		return "grpc-go"
	case strings.HasPrefix(fn, "golang.org/x/net/http2"):
		return "http2 framing, hpack"
	case strings.HasPrefix(fn, "google.golang.org/protobuf"):
		return "protobuf"
	case strings.HasPrefix(fn, "go.opentelemetry.io"):
		return "OpenTelemetry"
	case strings.HasPrefix(fn, "encoding/json"), strings.HasPrefix(fn, "github.com/google/jsonschema-go"):
		return "JSON and JSON Schema"
	case strings.HasPrefix(fn, "syscall."), strings.HasPrefix(fn, "internal/runtime/syscall"),
		strings.HasPrefix(fn, "runtime/internal/syscall"), strings.HasPrefix(fn, "internal/poll"):
		return "system calls"
	case hasAnyPrefix(fn, "runtime.gc", "runtime.scan", "runtime.mark", "runtime.greyobject", "runtime.findObject", "runtime.(*gc",
		"runtime.(*mspan)", "runtime.sweep", "runtime.bgsweep", "runtime.(*sweep", "runtime.tryDeferToSpanScan", "runtime.spanClass",
		"runtime.bulkBarrier", "runtime.(*spanSet)", "internal/runtime/gc", "gcWriteBarrier", "runtime.wbBuf", "runtime.(*wbBuf)",
		"runtime.typePointers", "runtime.(*mheap)", "runtime.heapBits", "runtime.spanOf", "runtime.pageIndexOf"):
		return "Go runtime: GC"
	case hasAnyPrefix(fn, "runtime.mallocgc", "runtime.newobject", "runtime.(*mcache)", "runtime.(*mcentral)", "runtime.memclr",
		"runtime.nextFreeFast", "runtime.heapSetType", "runtime.extractHeapBits", "runtime.(*fixalloc)", "runtime.divRoundUp", "runtime.(*mspan).nextFreeIndex"):
		return "Go runtime: allocation"
	case hasAnyPrefix(fn, "runtime.newstack", "runtime.copystack", "runtime.morestack", "runtime.adjust", "runtime.pcvalue",
		"runtime.step", "runtime.findfunc", "runtime.funcspdelta", "runtime.readvarint", "runtime.(*stkframe)", "runtime.(*unwinder)",
		"runtime.stackalloc", "runtime.stackfree", "runtime.stackcache"):
		return "Go runtime: goroutine stacks"
	case hasAnyPrefix(fn, "runtime.schedule", "runtime.findRunnable", "runtime.park", "runtime.futex", "runtime.note", "runtime.ready",
		"runtime.runq", "runtime.netpoll", "runtime.stealWork", "runtime.wakep", "runtime.startm", "runtime.stopm", "runtime.mPark",
		"runtime.lock", "runtime.unlock", "runtime.casgstatus", "runtime.gopark", "runtime.goready", "runtime.selectgo", "runtime.chan",
		"runtime.send", "runtime.recv", "runtime.mcall", "runtime.goexit", "runtime.newproc", "runtime.gfget", "runtime.gfput",
		"runtime.execute", "runtime.resetspinning", "runtime.checkTimers", "runtime.nanotime", "runtime.usleep", "runtime.osyield",
		"runtime.procyield", "runtime.(*timer", "runtime.(*timers", "runtime.(*randomEnum", "runtime.(*waitq", "runtime.semacquire", "runtime.semrelease"):
		return "Go runtime: scheduler, channels, timers, locks"
	case hasAnyPrefix(fn, "runtime.mem", "runtime.map", "internal/runtime/maps", "aeshash", "memeqbody", "runtime.growslice",
		"runtime.conv", "runtime.makeslice", "runtime.makechan", "runtime.makemap", "runtime.concat", "runtime.slicebytetostring",
		"runtime.stringtoslicebyte", "runtime.efaceeq", "runtime.ifaceeq", "runtime.typehash", "runtime.strhash", "runtime.assertE2I",
		"runtime.getitab", "runtime.typeAssert", "internal/abi", "internal/bytealg", "indexbytebody", "cmpbody"):
		return "Go runtime: memmove, maps, slices, strings"
	case strings.HasPrefix(fn, "runtime."), strings.HasPrefix(fn, "internal/runtime"):
		return "Go runtime: other"
	case strings.HasPrefix(fn, "net/http"), strings.HasPrefix(fn, "bufio."), strings.HasPrefix(fn, "net."):
		return "net, net/http"
	case strings.HasPrefix(fn, "context."), strings.HasPrefix(fn, "sync."), strings.HasPrefix(fn, "internal/sync"):
		return "context, sync"
	default:
		return "other std and libraries"
	}
}

func cmpDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

func round1(x float64) float64 { return float64(int(x*10+0.5)) / 10 }

// shortName drops the type arguments of a generic function's name, which pprof spells
// out in full (struct types with their tags): pkg/tool.Func[…].func1.
func shortName(fn string) string {
	var b strings.Builder
	depth := 0
	for _, r := range fn {
		switch {
		case r == '[':
			if depth == 0 {
				b.WriteString("[…]")
			}
			depth++
		case r == ']' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func hasAnyPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
