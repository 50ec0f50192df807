package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"
)

// node is one file, directory or symbolic link of a layer.
type node struct {
	typ      byte // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	mode     int64
	uid, gid int
	link     string // a symbolic link's target
	data     []byte
	from     string // the package (or "palisade-images") that put it there, for error messages
}

// tree is a layer's file system while it is assembled: a clean relative path ("usr/bin",
// never "./usr/bin/" or "/usr/bin") → its node.
type tree map[string]*node

// cleanPath turns a tar entry's name or a path in the image into a tree key.
func cleanPath(name string) string {
	p := strings.Trim(path.Clean("/"+name), "/")
	if p == "" {
		return "."
	}
	return p
}

// add puts n at p. A directory that is already there stays as it was (packages share
// directories); a file or link must be identical to the one already there.
func (t tree) add(p string, n *node) error {
	p = cleanPath(p)
	old, ok := t[p]
	switch {
	case !ok:
		t[p] = n
	case old.typ == tar.TypeDir && n.typ == tar.TypeDir:
	case old.typ == n.typ && old.link == n.link && old.mode == n.mode && bytes.Equal(old.data, n.data):
	default:
		return fmt.Errorf("%s of %s differs from the one %s installed", p, n.from, old.from)
	}
	return nil
}

// put puts n at p, replacing what is there.
func (t tree) put(p string, n *node) { t[cleanPath(p)] = n }

// addTar adds the entries of a tar stream (a Debian package's file system) that keep accepts.
// A hard link becomes a copy of its target, which the stream holds earlier: the layer's
// entries are sorted, and a link must not come before its target.
func (t tree) addTar(r io.Reader, from string, keep func(p string, typ byte) bool) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the files of %s: %w", from, err)
		}
		p := cleanPath(hdr.Name)
		if p == "." {
			continue
		}
		n := &node{typ: hdr.Typeflag, mode: hdr.Mode & 0o7777, from: from}
		switch hdr.Typeflag {
		case tar.TypeDir:
		case tar.TypeSymlink:
			n.link = hdr.Linkname
		case tar.TypeReg:
			if n.data, err = io.ReadAll(tr); err != nil {
				return fmt.Errorf("reading %s of %s: %w", p, from, err)
			}
		case tar.TypeLink:
			target, ok := t[cleanPath(hdr.Linkname)]
			if !ok || target.typ != tar.TypeReg {
				return fmt.Errorf("%s of %s: hard link to %s, which is no file before it", p, from, hdr.Linkname)
			}
			n.typ, n.mode, n.data = tar.TypeReg, target.mode, target.data
		default:
			return fmt.Errorf("%s of %s: tar entry type %q is not supported", p, from, hdr.Typeflag)
		}
		if !keep(p, n.typ) {
			continue
		}
		if err := t.add(p, n); err != nil {
			return err
		}
	}
}

// writeTar writes the tree as a tar stream that depends on nothing but the tree and mtime:
// entries in byte order of their paths (a directory before what it holds), every missing
// parent directory added, every time mtime, owners as numbers without names, no extended
// attributes.
func (t tree) writeTar(w io.Writer, mtime time.Time) error {
	if err := t.addParents(); err != nil {
		return err
	}
	paths := make([]string, 0, len(t))
	for p := range t {
		if p != "." {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		n := t[p]
		hdr := &tar.Header{Typeflag: n.typ, Name: p, Linkname: n.link, Mode: n.mode, Uid: n.uid, Gid: n.gid,
			Size: int64(len(n.data)), ModTime: mtime.UTC().Truncate(time.Second), Format: tar.FormatPAX}
		if n.typ == tar.TypeDir {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
		if _, err := tw.Write(n.data); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
	}
	return tw.Close()
}

// addParents adds a directory (0755, root's) for every missing parent, and fails when a
// parent is not a directory: a layer's entries must not go through a symbolic link.
func (t tree) addParents() error {
	for p, n := range t {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			d, ok := t[dir]
			if !ok {
				t[dir] = &node{typ: tar.TypeDir, mode: 0o755, from: n.from}
				continue
			}
			if d.typ != tar.TypeDir {
				return fmt.Errorf("%s of %s: its parent %s (of %s) is not a directory", p, n.from, dir, d.from)
			}
		}
	}
	return nil
}

// layerBytes returns the tree as a tar stream.
func (t tree) layerBytes(mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	if err := t.writeTar(&buf, mtime); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
