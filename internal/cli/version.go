package cli

import (
	"runtime/debug"
	"sync"
)

// version is the release the binaries were built as, set by the image builder with
// -ldflags "-X github.com/toolmesh/toolmesh/internal/cli.version=v0.1.0".
var version string

// Version is the version of this binary: the one it was built as, else the module
// version go install recorded, else the commit go build recorded (with "-dirty" for
// local changes), else "dev". Telemetry's service.version and a worker's registration
// report it.
var Version = sync.OnceValue(func() string {
	bi, _ := debug.ReadBuildInfo() // nil when the binary has none
	return versionOf(version, bi)
})

// versionOf is Version from the linked-in version and the build information (nil when
// there is none).
func versionOf(linked string, bi *debug.BuildInfo) string {
	if linked != "" {
		return linked
	}
	if bi == nil {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
