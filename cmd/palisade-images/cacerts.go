package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"sort"
	"strings"
)

// caBundlePath is where Go's crypto/x509 (and OpenSSL) look first for the system's CAs.
const caBundlePath = "etc/ssl/certs/ca-certificates.crt"

// caCertsDir is where Debian's ca-certificates ships its certificates.
const caCertsDir = "usr/share/ca-certificates/"

// caBundle returns the bundle that ca-certificates' postinst writes to
// /etc/ssl/certs/ca-certificates.crt on a fresh install: its debconf default trusts every
// certificate the package ships, which update-ca-certificates concatenates in the byte order
// of their paths below /usr/share/ca-certificates (the order `sort` gives in
// /etc/ca-certificates.conf), each ending with a newline. certs holds the package's files
// (a tree of its file system).
func caBundle(certs tree) ([]byte, error) {
	var names []string
	for p, n := range certs {
		if strings.HasPrefix(p, caCertsDir) && strings.HasSuffix(p, ".crt") && n.typ == tar.TypeReg {
			names = append(names, p)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("ca-certificates ships no certificate below /%s", caCertsDir)
	}
	sort.Strings(names)
	var bundle bytes.Buffer
	for _, p := range names {
		data := certs[p].data
		bundle.Write(data)
		if len(data) > 0 && data[len(data)-1] != '\n' {
			bundle.WriteByte('\n')
		}
	}
	return bundle.Bytes(), nil
}
