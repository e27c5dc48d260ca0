package redlock_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The Go snippets of README.md and docs/*.md compile: each ```go block is
// type-checked against the library and the packages it names. A block is
// either a whole file (it starts with "package") or a fragment, completed
// by this convention (docs/README.md states it for writers):
//
//   - a fragment of statements is the body of a function returning error;
//     one of declarations (func, type, var, const) stands at the top level;
//   - it may use, undeclared, the names that snippetGiven declares (addrs,
//     ctx, rl, nodes, lock, key, token, fence, store, v, rebuild, jobID,
//     and redsync's rs and mutex), and may declare them again;
//   - imports are added for the packages it names (snippetImports);
//   - a variable it declares need not be used.

// snippetImports are the packages a fragment may name, by the name it
// uses.
var snippetImports = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "net": "net", "os": "os",
	"slog": "log/slog", "strings": "strings", "time": "time",
	"redis":          "github.com/redis/go-redis/v9",
	"logging":        "github.com/redis/go-redis/v9/logging",
	"rueidis":        "github.com/redis/rueidis",
	"redlock":        "github.com/redlock/redlock",
	"redlockotel":    "github.com/redlock/redlock/redlockotel",
	"redlockrueidis": "github.com/redlock/redlock/redlockrueidis",
	// go-redsync/redsync v4, for docs/migrating.md's "before" blocks
	// (the bench module requires it).
	"redsync":      "github.com/go-redsync/redsync/v4",
	"redsyncredis": "github.com/go-redsync/redsync/v4/redis",
	"goredis":      "github.com/go-redsync/redsync/v4/redis/goredis/v9",
}

// snippetGiven declares what a fragment may use without declaring it.
const snippetGiven = `package snippet

import (
	"context"

	"github.com/go-redsync/redsync/v4"
	"github.com/redlock/redlock"
)

var (
	addrs []string
	ctx   context.Context
	rl    *redlock.Redlock
	nodes []redlock.Node
	lock  *redlock.Lock
	key   string
	token uint64
	fence redlock.Fence
	jobID string
	v     []byte
	store interface{ Put([]byte) error }
	rs    *redsync.Redsync
	mutex *redsync.Mutex
)

func rebuild(context.Context) error { return nil }
`

// snippet is one ```go block: where it is, and its text.
type snippet struct {
	where string // file:line of the opening fence
	code  string
}

// goSnippets returns the ```go blocks of the Markdown file name.
func goSnippets(t *testing.T, name string) []snippet {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []snippet
	var cur *snippet
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &snippet{where: fmt.Sprintf("%s:%d", name, i+1)}
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.code += line + "\n"
		}
	}
	return out
}

// snippetChecker type-checks snippets against the export data of the
// packages they may import, which go list -export builds once.
type snippetChecker struct {
	mu     sync.Mutex
	fset   *token.FileSet
	imp    types.Importer
	err    error
	export map[string]string // import path: its export data file
}

var checker snippetChecker

// importer returns the checker's importer, made on first use.
func (c *snippetChecker) importer() (types.Importer, error) {
	if c.imp != nil || c.err != nil {
		return c.imp, c.err
	}
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}"}
	for _, p := range snippetImports {
		args = append(args, p)
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		c.err = fmt.Errorf("go list -export: %w", err)
		return nil, c.err
	}
	c.export = map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, " "); ok && file != "" {
			c.export[path] = file
		}
	}
	c.fset = token.NewFileSet()
	c.imp = importer.ForCompiler(c.fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := c.export[path]
		if !ok {
			return nil, fmt.Errorf("%s is not among the packages a snippet may import (snippetImports)", path)
		}
		return os.Open(file)
	})
	return c.imp, nil
}

// check returns what is wrong with the snippet's Go, "" when nothing is.
func (c *snippetChecker) check(s snippet) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	imp, err := c.importer()
	if err != nil {
		return err.Error()
	}
	fset := c.fset
	src := s.code
	if !strings.HasPrefix(strings.TrimSpace(src), "package ") {
		src = completeSnippet(src)
	}
	files := []*ast.File{}
	for _, f := range []struct{ name, src string }{{"given.go", snippetGiven}, {s.where, src}} {
		if f.name == "given.go" && strings.HasPrefix(strings.TrimSpace(s.code), "package ") {
			continue // a whole file stands alone
		}
		file, err := parser.ParseFile(fset, f.name, f.src, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Sprintf("%v\n%s", err, src)
		}
		files = append(files, file)
	}
	var errs []string
	conf := types.Config{Importer: imp, Error: func(err error) {
		if te, ok := err.(types.Error); ok && te.Soft && strings.Contains(te.Msg, "declared and not used") {
			return
		}
		errs = append(errs, err.Error())
	}}
	_, _ = conf.Check("snippet", fset, files, nil)
	if len(errs) > 0 {
		return strings.Join(errs, "\n") + "\n" + src
	}
	return ""
}

// completeSnippet makes a fragment a file by the convention above.
func completeSnippet(code string) string {
	var b strings.Builder
	b.WriteString("package snippet\n\nimport (\n")
	for _, name := range namedPackages(code) {
		fmt.Fprintf(&b, "\t%s %q\n", name, snippetImports[name])
	}
	b.WriteString(")\n\n")
	if isDeclarations(code) {
		b.WriteString(code)
	} else {
		b.WriteString("func _() error {\n" + code + "\treturn nil\n}\n")
	}
	return b.String()
}

// namedPackages returns the names of the packages of snippetImports that
// code names (redlock.New: redlock), outside comments and strings.
func namedPackages(code string) []string {
	var sc scanner.Scanner
	fset := token.NewFileSet()
	sc.Init(fset.AddFile("", -1, len(code)), []byte(code), nil, 0)
	var names []string
	var prev string // the identifier just before, if the last token was one
	for {
		_, tok, lit := sc.Scan()
		if tok == token.EOF {
			return names
		}
		if _, ok := snippetImports[prev]; ok && tok == token.PERIOD && !slices.Contains(names, prev) {
			names = append(names, prev)
		}
		prev = ""
		if tok == token.IDENT {
			prev = lit
		}
	}
}

// isDeclarations reports whether code starts with a top-level
// declaration rather than a statement.
func isDeclarations(code string) bool {
	for _, line := range strings.Split(code, "\n") {
		l := strings.TrimSpace(line)
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		for _, kw := range []string{"func ", "type ", "const ", "import "} {
			if strings.HasPrefix(line, kw) {
				return true
			}
		}
		return false
	}
	return false
}

// docFiles are the Markdown files whose snippets and links are checked.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, docs...)
}

// TestDocSnippetsCompile: every ```go block of README.md and docs/*.md
// type-checks. The packages come from the workspace (go.work, as make
// test sets it): redlockotel, redlockrueidis and redsync are other
// modules'.
func TestDocSnippetsCompile(t *testing.T) {
	n := 0
	for _, name := range docFiles(t) {
		for _, s := range goSnippets(t, name) {
			n++
			if msg := checker.check(s); msg != "" {
				t.Errorf("%s does not compile:\n%s", s.where, msg)
			}
		}
	}
	if n < 10 {
		t.Errorf("found %d Go snippets; want the README's and the docs' (at least 10)", n)
	}
}

// TestDocSnippetCheckerCatches: the check fails a snippet that does not
// compile, such as the README's old errors.As(err, &*redlock.QuorumError),
// and passes one that does.
func TestDocSnippetCheckerCatches(t *testing.T) {
	for code, ok := range map[string]bool{
		"var qe *redlock.QuorumError\n_, err := rl.TryLock(ctx, key)\nif errors.As(err, &qe) {\n\treturn err\n}\n": true,
		"_, err := rl.TryLock(ctx, key)\nif errors.As(err, &*redlock.QuorumError) {\n\treturn err\n}\n":            false,
		"lock, err := rl.Lock(ctx, key)\ndefer lock.Unlock(ctx, key)\n":                                            false,
		"func main() {\n\tfmt.Println(redlock.MaxKeyLen)\n}\n":                                                     true,
		"package main\n\nfunc main() { undefined() }\n":                                                            false,
	} {
		msg := checker.check(snippet{where: "test.md:1", code: code})
		if (msg == "") != ok {
			t.Errorf("check(%q) = %q; want ok=%v", code, msg, ok)
		}
	}
}

// mdLink matches a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinks: every relative link of README.md and docs/*.md names a
// file that exists and, with #anchor, a heading of it.
func TestDocLinks(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(name string) map[string]bool {
		if a, ok := anchors[name]; ok {
			return a
		}
		a := map[string]bool{}
		if b, err := os.ReadFile(name); err == nil && strings.HasSuffix(name, ".md") {
			inCode := false
			for _, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(line, "```") {
					inCode = !inCode
				}
				if !inCode && strings.HasPrefix(line, "#") {
					a[slug(strings.TrimLeft(line, "# "))] = true
				}
			}
		}
		anchors[name] = a
		return a
	}
	for _, name := range docFiles(t) {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := name
				if file != "" {
					path = filepath.Join(filepath.Dir(name), file)
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link to %s: no such file", name, i+1, target)
					continue
				}
				if anchor != "" && !anchorsOf(path)[anchor] {
					t.Errorf("%s:%d: link to %s: %s has no heading #%s", name, i+1, target, path, anchor)
				}
			}
		}
	}
}

// slug is GitHub's anchor for a heading: lower case, spaces as hyphens,
// other punctuation dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || 'a' <= r && r <= 'z' || '0' <= r && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestInternalsContents: docs/internals.md's table of contents lists each
// of its sections.
func TestInternalsContents(t *testing.T) {
	b, err := os.ReadFile("docs/internals.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, line := range strings.Split(page, "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			if entry := fmt.Sprintf("- [%s](#%s)", h, slug(h)); !strings.Contains(page, entry) {
				t.Errorf("docs/internals.md's contents lack %q", entry)
			}
		}
	}
}
