// Command modproxy writes modules of this repository, at one git revision,
// into a file-based module proxy (GOPROXY=file:///DIR), as the proxy would
// serve them once that revision is tagged: the zip is made from git (only
// tracked files, without nested modules) by golang.org/x/mod/zip, the way
// the go command makes it from a tag.
//
//	go run . -repo ../.. -rev HEAD -version v0.2.0 -out /tmp/proxy . chaos
//
// Each argument is a module's directory in the repository ("." for the
// root). The go command checks nothing of a file proxy's origin; set
// GONOSUMDB=github.com/redlock/* (or GOFLAGS=-mod=mod for go.sum) when it
// serves versions that are not published.
//
// It lives in a module of its own so that golang.org/x/mod stays out of
// the library's go.mod.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

func main() {
	repo := flag.String("repo", ".", "the git work tree")
	rev := flag.String("rev", "HEAD", "the revision to serve")
	version := flag.String("version", "", "the version to serve it as (vX.Y.Z)")
	out := flag.String("out", "", "the proxy's directory")
	flag.Parse()
	if *version == "" || *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: modproxy [-repo DIR] [-rev REV] -version vX.Y.Z -out DIR MODULE-DIR...")
		os.Exit(2)
	}
	root, err := filepath.Abs(*repo)
	if err == nil {
		for _, dir := range flag.Args() {
			if err = serve(root, *rev, *version, *out, dir); err != nil {
				break
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

// serve writes the module in dir (relative to repo) at rev as version
// into the proxy at out.
func serve(repo, rev, version, out, dir string) error {
	dir = strings.Trim(path.Clean(filepath.ToSlash(dir)), "/")
	if dir == "." {
		dir = ""
	}
	gomod, err := git(repo, "show", rev+":"+path.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	modPath := modfile.ModulePath(gomod)
	if modPath == "" {
		return fmt.Errorf("%s/go.mod at %s: no module line", dir, rev)
	}
	if err := module.Check(modPath, version); err != nil {
		return err
	}
	when, err := git(repo, "log", "-1", "--format=%cI", rev)
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(when)))
	if err != nil {
		return err
	}
	escPath, err := module.EscapePath(modPath)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	at := filepath.Join(out, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	base := filepath.Join(at, escVersion)

	var zip bytes.Buffer
	subdir := ""
	if dir != "" {
		subdir = dir + "/"
	}
	if err := modzip.CreateFromVCS(&zip, module.Version{Path: modPath, Version: version}, repo, rev, subdir); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t.UTC()})
	if err != nil {
		return err
	}
	for name, b := range map[string][]byte{".zip": zip.Bytes(), ".mod": gomod, ".info": info} {
		if err := os.WriteFile(base+name, b, 0o644); err != nil {
			return err
		}
	}

	list := filepath.Join(at, "list")
	old, err := os.ReadFile(list)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	versions := strings.Fields(string(old))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	if err := os.WriteFile(list, []byte(strings.Join(versions, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s@%s (%s at %s)\n", modPath, version, "./"+dir, rev)
	return nil
}

func git(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
