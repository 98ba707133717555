// Command mkimages builds the container images strata's image tests read,
// from a Debian root filesystem tarball (scripts/images.sh makes one with
// mmdebstrap): three images that share layers,
//
//	base     = [base]
//	env      = [base, env]
//	instance = [base, env, instance]
//
// written as one OCI layout (tags base, env, instance) and as
// docker-archive tarballs (env.tar, instance.tar). The env and instance
// layers hold every case the layer reader must get right: a whiteout of a
// file, of a directory and of a lower hard link, opaque directories, a
// hard link, symlinks, a character device, a FIFO, setuid, files owned by
// root and by others, and a user.* xattr. Their tars are reproducible
// (fixed times and order), so the digests are the same on every run.
//
// Not linked into strata; built and run by scripts/images.sh only.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"runtime"
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

var epoch = time.Unix(1700000000, 0).UTC()

// entry is one member of a generated layer tar.
type entry struct {
	name     string
	typ      byte
	mode     int64
	uid, gid int
	body     string
	link     string
	major    int64
	minor    int64
	xattrs   map[string]string
}

func dir(n string) entry           { return entry{name: n, typ: tar.TypeDir, mode: 0o755} }
func file(n, body string) entry    { return entry{name: n, typ: tar.TypeReg, mode: 0o644, body: body} }
func whiteout(n string) entry      { return entry{name: n, typ: tar.TypeReg, mode: 0o644} }
func symlink(n, to string) entry   { return entry{name: n, typ: tar.TypeSymlink, mode: 0o777, link: to} }
func hardlink(n, to string) entry  { return entry{name: n, typ: tar.TypeLink, mode: 0o644, link: to} }
func (e entry) m(mode int64) entry { e.mode = mode; return e }
func (e entry) own(uid, gid int) entry {
	e.uid, e.gid = uid, gid
	return e
}

func layerTar(es []entry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{
			Name: e.name, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			ModTime: epoch, Linkname: e.link, Devmajor: e.major, Devminor: e.minor,
			Format: tar.FormatPAX,
		}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if len(e.xattrs) > 0 {
			h.PAXRecords = map[string]string{}
			for k, v := range e.xattrs {
				h.PAXRecords["SCHILY.xattr."+k] = v
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			log.Fatalf("%s: %v", e.name, err)
		}
		if h.Size > 0 {
			if _, err := io.WriteString(tw, e.body); err != nil {
				log.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		log.Fatal(err)
	}
	return buf.Bytes()
}

func bytesLayer(b []byte) v1.Layer {
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		log.Fatal(err)
	}
	return l
}

// mustHave fails unless the base tar holds every name in want (the
// whiteouts below must delete something).
func mustHave(baseTar string, want ...string) {
	f, err := os.Open(baseTar)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatalf("%s: %v", baseTar, err)
		}
		seen[strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")] = true
	}
	for _, w := range want {
		if !seen[w] {
			log.Fatalf("%s: has no %s, which the env layer deletes", baseTar, w)
		}
	}
}

func main() {
	base := flag.String("base", "", "the base root filesystem as a tar")
	out := flag.String("out", "", "output directory (created)")
	swe := flag.String("swe", "", "the base root with python3-pytest, git and patch as a tar: also build the SWE-bench images (swebench.go)")
	flag.Parse()
	if *base == "" || *out == "" {
		log.Fatal("usage: mkimages -base ROOTFS.tar -out DIR")
	}
	mustHave(*base, "etc/issue.net", "usr/share/common-licenses", "var/lib/dpkg/alternatives", "etc/hostname")

	baseLayer, err := tarball.LayerFromFile(*base, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		log.Fatal(err)
	}
	envLayer := bytesLayer(layerTar([]entry{
		dir("etc/"),
		whiteout("etc/.wh.issue.net"),
		dir("opt/"),
		dir("opt/env/"),
		dir("opt/env/bin/"),
		file("opt/env/bin/tool", "#!/bin/sh\necho tool \"$@\"\n").m(0o755),
		hardlink("opt/env/bin/tool-link", "opt/env/bin/tool"),
		file("opt/env/bin/other", "other\n").m(0o755),
		hardlink("opt/env/bin/other-link", "opt/env/bin/other"),
		symlink("opt/env/current", "bin"),
		symlink("opt/env/abs", "/opt/env/bin/tool"),
		file("opt/env/secret", "secret\n").m(0o640).own(1000, 1000),
		file("opt/env/setuid", "suid\n").m(0o4755),
		{name: "opt/env/xattr", typ: tar.TypeReg, mode: 0o644, body: "x\n", xattrs: map[string]string{"user.strata": "yes"}},
		{name: "opt/env/null0", typ: tar.TypeChar, mode: 0o666, major: 1, minor: 3},
		{name: "opt/env/fifo", typ: tar.TypeFifo, mode: 0o600},
		dir("opt/env/lib/").own(1000, 1000),
		file("opt/env/lib/a.py", "A = 1\n").own(1000, 1000),
		file("opt/env/lib/b.py", "B = 2\n"),
		dir("usr/"),
		dir("usr/share/"),
		dir("usr/share/common-licenses/"),
		whiteout("usr/share/common-licenses/.wh..wh..opq"),
		file("usr/share/common-licenses/ONLY", "the only licence left\n"),
		dir("var/"),
		dir("var/lib/"),
		dir("var/lib/dpkg/"),
		whiteout("var/lib/dpkg/.wh.alternatives"),
	}))
	instanceLayer := bytesLayer(layerTar([]entry{
		dir("etc/"),
		file("etc/hostname", "testbed\n"),
		dir("opt/"),
		dir("opt/env/"),
		dir("opt/env/bin/"),
		whiteout("opt/env/bin/.wh.other-link"),
		whiteout("opt/env/.wh.current"),
		dir("opt/env/lib/").m(0o750).own(1000, 1000),
		whiteout("opt/env/lib/.wh..wh..opq"),
		file("opt/env/lib/c.py", "C = 3\n"),
		dir("testbed/"),
		file("testbed/README.md", "# testbed\n"),
		dir("testbed/pkg/"),
		file("testbed/pkg/__init__.py", "VALUE = 42\n"),
		file("testbed/test_pkg.py", "from pkg import VALUE\n\ndef test_value():\n    assert VALUE == 42\n"),
		hardlink("testbed/test_link.py", "testbed/test_pkg.py"),
	}))

	mk := func(tag string, layers []v1.Layer, cfg v1.Config) v1.Image {
		img, err := mutate.AppendLayers(empty.Image, layers...)
		if err != nil {
			log.Fatal(err)
		}
		img = mutate.MediaType(img, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		cf, err := img.ConfigFile()
		if err != nil {
			log.Fatal(err)
		}
		cf = cf.DeepCopy()
		cf.Architecture, cf.OS = runtime.GOARCH, "linux"
		cf.Created = v1.Time{Time: epoch}
		cf.Config = cfg
		img, err = mutate.ConfigFile(img, cf)
		if err != nil {
			log.Fatal(err)
		}
		return img
	}
	path := "PATH=/opt/env/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	images := []tagged{
		{"base", mk("base", []v1.Layer{baseLayer}, v1.Config{Env: []string{path}, Cmd: []string{"bash"}})},
		{"env", mk("env", []v1.Layer{baseLayer, envLayer}, v1.Config{
			Env: []string{path, "LANG=C.UTF-8"}, Cmd: []string{"bash"},
			Labels: map[string]string{"org.strata.test": "env"},
		})},
		{"instance", mk("instance", []v1.Layer{baseLayer, envLayer, instanceLayer}, v1.Config{
			Env: []string{path, "LANG=C.UTF-8", "TESTBED=1"}, WorkingDir: "/testbed", User: "root",
			Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{"echo hi"},
			Labels: map[string]string{"org.strata.test": "instance", "org.opencontainers.image.title": "testbed"},
		})},
	}

	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	if *swe != "" {
		images = append(images, swebench(*base, *swe, *out, baseLayer, mk)...)
	}
	lp, err := layout.Write(filepath.Join(*out, "oci"), empty.Index)
	if err != nil {
		log.Fatal(err)
	}
	for _, im := range images {
		if err := lp.AppendImage(im.img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": im.tag,
		})); err != nil {
			log.Fatal(err)
		}
		if im.tag == "base" || strings.HasPrefix(im.tag, "sweb.") {
			continue
		}
		tag, err := name.NewTag("strata.test/" + im.tag + ":latest")
		if err != nil {
			log.Fatal(err)
		}
		if err := tarball.WriteToFile(filepath.Join(*out, im.tag+".tar"), tag, im.img); err != nil {
			log.Fatal(err)
		}
		d, _ := im.img.Digest()
		fmt.Printf("%s %s\n", im.tag, d)
	}
}
