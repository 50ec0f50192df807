package main

import (
	"archive/tar"
	"testing"
)

// TestCABundle: the certificates in the byte order of their paths (as update-ca-certificates
// reads /etc/ca-certificates.conf), each ending with a newline, nothing else of the package.
func TestCABundle(t *testing.T) {
	file := func(data string) *node { return &node{typ: tar.TypeReg, mode: 0o644, data: []byte(data)} }
	certs := tree{
		"usr/share/ca-certificates/mozilla/b.crt":  file("b\n"),
		"usr/share/ca-certificates/mozilla/Z.crt":  file("Z"), // no final newline
		"usr/share/ca-certificates/mozilla/a.crt":  file("a\n"),
		"usr/share/ca-certificates/mozilla/README": file("not a certificate\n"),
		"usr/share/ca-certificates/mozilla":        {typ: tar.TypeDir, mode: 0o755},
		"usr/sbin/update-ca-certificates":          file("#!/bin/sh\n"),
	}
	got, err := caBundle(certs)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Z\na\nb\n"; string(got) != want {
		t.Errorf("bundle = %q, want %q", got, want)
	}
	if _, err := caBundle(tree{}); err == nil {
		t.Error("a package without certificates gave a bundle")
	}
}
