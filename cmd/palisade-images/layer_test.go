package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// debTar is a tar stream as dpkg-deb --fsys-tarfile writes one: "./" names, the package's
// own times and owner names, a hard link after its target.
func debTar(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	when := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, h := range []tar.Header{
		{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755},
		{Typeflag: tar.TypeDir, Name: "./usr/", Mode: 0o755},
		{Typeflag: tar.TypeDir, Name: "./usr/bin/", Mode: 0o755},
		{Typeflag: tar.TypeReg, Name: "./usr/bin/tool", Mode: 0o4755, Size: 4},
		{Typeflag: tar.TypeLink, Name: "./usr/bin/tool-alias", Linkname: "./usr/bin/tool"},
		{Typeflag: tar.TypeSymlink, Name: "./usr/bin/a-link", Linkname: "tool"},
		{Typeflag: tar.TypeReg, Name: "./usr/share/man/man1/tool.1.gz", Mode: 0o644, Size: 3},
		{Typeflag: tar.TypeReg, Name: "./usr/share/doc/tool/copyright", Mode: 0o644, Size: 3},
		{Typeflag: tar.TypeReg, Name: "./usr/share/doc/tool/changelog.gz", Mode: 0o644, Size: 3},
		{Typeflag: tar.TypeDir, Name: "./var/local/", Mode: 0o2775, Gid: 50, Gname: "staff"},
	} {
		h.ModTime, h.Uname = when, "root"
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte("data")[:h.Size]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type entry struct {
	Name, Link string
	Type       byte
	Mode       int64
	UID, GID   int
	Data       string
}

func readLayer(t *testing.T, layer []byte, epoch time.Time) []entry {
	t.Helper()
	var got []entry
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) || h.Uname != "" || h.Gname != "" || len(h.PAXRecords) > 0 || !h.AccessTime.IsZero() {
			t.Errorf("%s: mtime %s, owner names %q:%q, PAX records %v, atime %s; want the epoch %s and nothing else",
				h.Name, h.ModTime, h.Uname, h.Gname, h.PAXRecords, h.AccessTime, epoch)
		}
		data, _ := io.ReadAll(tr)
		got = append(got, entry{h.Name, h.Linkname, h.Typeflag, h.Mode, h.Uid, h.Gid, string(data)})
	}
}

// TestLayerIsNormalized builds a layer from a package's tar stream and checks what makes it
// reproducible: sorted entries, every time the epoch, numeric owners, parents added, a hard
// link made a copy; and that documentation but copyright files is left out.
func TestLayerIsNormalized(t *testing.T) {
	epoch := time.Unix(1700000000, 0).UTC()
	tr := tree{}
	if err := tr.addTar(bytes.NewReader(debTar(t)), "tool", keepDebFile); err != nil {
		t.Fatal(err)
	}
	tr.put("home/nonroot", &node{typ: tar.TypeDir, mode: 0o700, uid: 65532, gid: 65532})
	tr.put("opt/x/y/file", &node{typ: tar.TypeReg, mode: 0o644, data: []byte("x")})
	layer, err := tr.layerBytes(epoch)
	if err != nil {
		t.Fatal(err)
	}
	want := []entry{
		{Name: "home/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "home/nonroot/", Type: tar.TypeDir, Mode: 0o700, UID: 65532, GID: 65532},
		{Name: "opt/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "opt/x/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "opt/x/y/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "opt/x/y/file", Type: tar.TypeReg, Mode: 0o644, Data: "x"},
		{Name: "usr/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "usr/bin/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "usr/bin/a-link", Link: "tool", Type: tar.TypeSymlink},
		{Name: "usr/bin/tool", Type: tar.TypeReg, Mode: 0o4755, Data: "data"},
		{Name: "usr/bin/tool-alias", Type: tar.TypeReg, Mode: 0o4755, Data: "data"},
		{Name: "usr/share/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "usr/share/doc/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "usr/share/doc/tool/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "usr/share/doc/tool/copyright", Type: tar.TypeReg, Mode: 0o644, Data: "dat"},
		{Name: "var/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "var/local/", Type: tar.TypeDir, Mode: 0o2775},
	}
	if diff := cmp.Diff(want, readLayer(t, layer, epoch)); diff != "" {
		t.Errorf("layer (-want +got):\n%s", diff)
	}

	// The same files added in another order give the same bytes.
	again := tree{}
	for _, p := range []string{"opt/x/y/file", "home/nonroot"} {
		again.put(p, tr[p])
	}
	if err := again.addTar(bytes.NewReader(debTar(t)), "tool", keepDebFile); err != nil {
		t.Fatal(err)
	}
	layer2, err := again.layerBytes(epoch)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(layer, layer2) {
		t.Error("the same files in another order gave another layer")
	}
}

func TestTreeAdd(t *testing.T) {
	file := func(data string) *node { return &node{typ: tar.TypeReg, mode: 0o644, data: []byte(data), from: data} }
	tests := []struct {
		name    string
		first   *node
		second  *node
		wantErr bool
	}{
		{"shared directory", &node{typ: tar.TypeDir, mode: 0o755}, &node{typ: tar.TypeDir, mode: 0o700}, false},
		{"identical file", file("a"), file("a"), false},
		{"different file", file("a"), file("b"), true},
		{"file over directory", &node{typ: tar.TypeDir, mode: 0o755}, file("a"), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := tree{}
			if err := tr.add("./x/", tc.first); err != nil {
				t.Fatal(err)
			}
			err := tr.add("/x", tc.second)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want an error: %t", err, tc.wantErr)
			}
			if tr["x"] != tc.first {
				t.Error("the first entry was replaced")
			}
		})
	}
}

// TestLayerRefusesPathsThroughLinks: an entry below a symbolic link would be written through
// it (or refused) by the runtime unpacking the layer.
func TestLayerRefusesPathsThroughLinks(t *testing.T) {
	tr := tree{
		"lib":          {typ: tar.TypeSymlink, link: "usr/lib", from: "merged"},
		"lib/libc.so6": {typ: tar.TypeReg, mode: 0o644, from: "libc6"},
	}
	_, err := tr.layerBytes(time.Unix(0, 0))
	if err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("error = %v, want one saying lib is not a directory", err)
	}
}

func TestKeepDebFile(t *testing.T) {
	const dir, file = tar.TypeDir, tar.TypeReg
	tests := []struct {
		path string
		typ  byte
		want bool
	}{
		{"usr/bin/ipmitool", file, true},
		{"usr/share/doc", dir, true},
		{"usr/share/doc/libc6", dir, true},
		{"usr/share/doc/libgcc-s1", tar.TypeSymlink, true},
		{"usr/share/doc/libc6/copyright", file, true},
		{"usr/share/doc/libc6/changelog.gz", file, false},
		{"usr/share/doc/libc6/examples", dir, false},
		{"usr/share/man/man1/ipmitool.1.gz", file, false},
		{"usr/share/man", dir, false},
		{"usr/share/info", dir, false},
		{"usr/share/lintian/overrides/libc6", file, false},
		{"usr/share/misc/enterprise-numbers.txt", file, true},
		{"usr/share/manual/readme", file, true},
	}
	for _, tc := range tests {
		if got := keepDebFile(tc.path, tc.typ); got != tc.want {
			t.Errorf("keepDebFile(%q) = %t, want %t", tc.path, got, tc.want)
		}
	}
}
