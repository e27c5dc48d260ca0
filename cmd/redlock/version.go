package main

import (
	"runtime/debug"
	"strings"
)

// libraryPath is the library's module, whose version --version shows when
// it is not the command's.
const libraryPath = "github.com/redlock/redlock"

// version is what redlock --version prints: the command's module version,
// then, for a build without one ("(devel)", as from go install
// ./cmd/redlock in a clone), the VCS revision when the go command recorded
// one (12 hex digits, and "modified" when the tree had changes), the
// library's version when it differs, and the Go release that built it:
//
//	redlock v0.2.0, go1.26.8
//	redlock (devel), go1.26.8
//	redlock (devel), revision 1a2b3c4d5e6f (modified), go1.26.8
//
// In a clone the go command uses go.work, and records no VCS information
// unless asked (-buildvcs=true); then the version is a pseudo-version
// that names the commit: v0.0.0-20261204171255-1ebff7265159.
func version(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return "redlock: no build information (built without module support)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	parts := []string{"redlock " + v}
	if v == "(devel)" {
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			rev = "revision " + rev[:min(12, len(rev))]
			if modified == "true" {
				rev += " (modified)"
			}
			parts = append(parts, rev)
		}
	}
	for _, d := range bi.Deps {
		if d.Path == libraryPath && d.Version != v {
			parts = append(parts, "library "+d.Version)
		}
	}
	return strings.Join(append(parts, bi.GoVersion), ", ")
}
