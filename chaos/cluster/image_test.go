package cluster

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestParseLdd(t *testing.T) {
	out := []byte("\tlinux-vdso.so.1 (0x00007ffd)\n" +
		"\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f0d)\n" +
		"\t/lib64/ld-linux-x86-64.so.2 (0x00007f0e)\n")
	got, err := parseLdd(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/lib/x86_64-linux-gnu/libm.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseLdd = %q, want %q", got, want)
	}
	if _, err := parseLdd([]byte("\tlibfoo.so.1 => not found\n")); err == nil {
		t.Fatal("parseLdd accepted a missing library")
	}
}

func TestSplitRef(t *testing.T) {
	for ref, want := range map[string][2]string{
		"redis:7-alpine":              {"redis", "7-alpine"},
		"redis":                       {"redis", "latest"},
		"localhost:5000/redis":        {"localhost:5000/redis", "latest"},
		"localhost:5000/redis:7":      {"localhost:5000/redis", "7"},
		"redis@sha256:0123456789abcd": {"redis@sha256:0123456789abcd", ""},
	} {
		repo, tag := splitRef(ref)
		if [2]string{repo, tag} != want {
			t.Errorf("splitRef(%q) = %q, %q; want %q", ref, repo, tag, want)
		}
	}
}

// TestWriteRootfs checks the tarball holds a regular file (not a symlink)
// under the server's name, its parents, and the fixed directories.
func TestWriteRootfs(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "redis-check-rdb")
	if err := os.WriteFile(real, []byte("ELF..."), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "redis-server")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeRootfs(&buf, []rootfsFile{{src: link, dst: serverPathInImage}}); err != nil {
		t.Fatal(err)
	}
	entries := map[string]*tar.Header{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[h.Name] = h
	}
	server := entries["usr/local/bin/redis-server"]
	if server == nil || server.Typeflag != tar.TypeReg || server.Size != 6 || server.Mode != 0o755 {
		t.Fatalf("redis-server entry = %+v, want a 6-byte regular file, mode 0755", server)
	}
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/", "data/", "tmp/", "etc/"} {
		if h := entries[d]; h == nil || h.Typeflag != tar.TypeDir {
			t.Errorf("no directory %s in the tarball", d)
		}
	}
	if entries["tmp/"].Mode != 0o1777 {
		t.Errorf("/tmp mode = %o, want 1777", entries["tmp/"].Mode)
	}
	if entries["etc/passwd"] == nil {
		t.Error("no /etc/passwd in the tarball")
	}
}
