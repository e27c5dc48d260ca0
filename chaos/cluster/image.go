package cluster

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	dc "github.com/ory/dockertest/v3/docker"
)

// Image names and the variable that overrides them.
const (
	// ImageEnv names the environment variable that picks the image when
	// Options.Image is empty.
	ImageEnv = "REDLOCK_CHAOS_IMAGE"
	// LocalImage is the image built from this host's redis-server when no
	// other image is at hand.
	LocalImage = "redlock-redis:local"
	// PublicImage is the image pulled when LocalImage is absent.
	PublicImage = "redis:7-alpine"
)

// resolveImage returns the image to run, making it present first: the
// wanted one (Options.Image, else $REDLOCK_CHAOS_IMAGE) inspected or pulled;
// else LocalImage if present; else PublicImage if present or pullable; else
// LocalImage built from this host's redis-server.
func resolveImage(ctx context.Context, c *dc.Client, want string) (string, error) {
	if want == "" {
		want = os.Getenv(ImageEnv)
	}
	if want != "" {
		if err := ensurePresent(ctx, c, want); err != nil {
			return "", fmt.Errorf("cluster: image %q: %w", want, err)
		}
		return want, nil
	}
	if _, err := c.InspectImage(LocalImage); err == nil {
		return LocalImage, nil
	}
	pullErr := ensurePresent(ctx, c, PublicImage)
	if pullErr == nil {
		return PublicImage, nil
	}
	if err := buildLocalImage(ctx, c); err != nil {
		return "", fmt.Errorf("cluster: no image: pull %s: %w; build %s: %w",
			PublicImage, pullErr, LocalImage, err)
	}
	return LocalImage, nil
}

// ensurePresent inspects ref and pulls it when the engine does not have it.
func ensurePresent(ctx context.Context, c *dc.Client, ref string) error {
	if _, err := c.InspectImage(ref); err == nil {
		return nil
	} else if !errors.Is(err, dc.ErrNoSuchImage) {
		return err
	}
	repo, tag := splitRef(ref)
	return c.PullImage(dc.PullImageOptions{
		Repository:   repo,
		Tag:          tag,
		OutputStream: io.Discard,
		Context:      ctx,
	}, dc.AuthConfiguration{})
}

// splitRef splits "repo:tag" for the pull API; a reference by digest stays
// whole.
func splitRef(ref string) (repo, tag string) {
	if strings.Contains(ref, "@") {
		return ref, ""
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i], ref[i+1:]
	}
	return ref, "latest"
}

// buildLocalImage imports LocalImage from a root filesystem made of this
// host's redis-server, the shared libraries it links and the dynamic loader.
// It needs no base image and no registry. The image has no ENTRYPOINT (the
// import API of go-dockerclient cannot send Dockerfile changes): run it as
// "redis-server ...", which the default PATH finds in /usr/local/bin.
func buildLocalImage(ctx context.Context, c *dc.Client) error {
	files, err := rootfsFiles()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "redlock-redis-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tarPath := filepath.Join(dir, "rootfs.tar")
	if err := writeRootfsFile(tarPath, files); err != nil {
		return err
	}
	f, err := os.Open(tarPath)
	if err != nil {
		return err
	}
	defer f.Close()
	repo, tag := splitRef(LocalImage)
	return c.ImportImage(dc.ImportImageOptions{
		Repository:   repo,
		Tag:          tag,
		Source:       "-",
		InputStream:  f,
		OutputStream: io.Discard,
		Context:      ctx,
	})
}

// rootfsFile is one regular file of the image: src on this host, dst in
// the image.
type rootfsFile struct {
	src, dst string
}

// serverPathInImage is where the image holds redis-server: on the default
// PATH, under the name that makes the binary act as a server (Debian ships
// it as a symlink to redis-check-rdb, which picks its mode from argv[0]).
const serverPathInImage = "/usr/local/bin/redis-server"

// rootfsFiles lists redis-server and everything `ldd` says it loads.
func rootfsFiles() ([]rootfsFile, error) {
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("no redis-server on this host to build %s from: %w", LocalImage, err)
	}
	out, err := exec.Command("ldd", server).CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("not a dynamic executable")) {
		return nil, fmt.Errorf("ldd %s: %w: %s", server, err, out)
	}
	libs, err := parseLdd(out)
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", server, err)
	}
	files := []rootfsFile{{src: server, dst: serverPathInImage}}
	for _, lib := range libs {
		files = append(files, rootfsFile{src: lib, dst: lib})
	}
	return files, nil
}

// parseLdd returns the absolute paths in ldd's output: the libraries
// ("libc.so.6 => /lib/.../libc.so.6 (0x...)") and the loader
// ("/lib64/ld-linux-x86-64.so.2 (0x...)"). The vDSO has no file.
func parseLdd(out []byte) ([]string, error) {
	var paths []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("missing library: %s", strings.TrimSpace(line))
		}
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				paths = append(paths, f)
				break
			}
		}
	}
	return paths, sc.Err()
}

func writeRootfsFile(name string, files []rootfsFile) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := writeRootfs(f, files); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeRootfs writes a root filesystem tarball: the files (symlinks
// followed, so each lands as a regular file), their parent directories,
// /data, /tmp and a minimal /etc/passwd and /etc/group.
func writeRootfs(w io.Writer, files []rootfsFile) error {
	etc := map[string]string{
		"/etc/passwd": "root:x:0:0:root:/root:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"/etc/group":  "root:x:0:\nnogroup:x:65534:\n",
	}
	dirs := map[string]int64{"/data": 0o755, "/tmp": 0o1777, "/root": 0o700}
	addParents := func(p string) {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755
			}
		}
	}
	for _, f := range files {
		addParents(f.dst)
	}
	for p := range etc {
		addParents(p)
	}
	names := make([]string, 0, len(dirs))
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names) // parents sort before their children

	tw := tar.NewWriter(w)
	for _, d := range names {
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: dirs[d],
		}); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := addFile(tw, f); err != nil {
			return err
		}
	}
	for _, p := range []string{"/etc/group", "/etc/passwd"} {
		body := etc[p]
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: 0o644, Size: int64(len(body)),
		}); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, body); err != nil {
			return err
		}
	}
	return tw.Close()
}

func addFile(tw *tar.Writer, f rootfsFile) error {
	src, err := os.Open(f.src) // follows symlinks
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", f.src)
	}
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(f.dst, "/"),
		Mode:     int64(fi.Mode().Perm()),
		Size:     fi.Size(),
		ModTime:  fi.ModTime(),
	}); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}
