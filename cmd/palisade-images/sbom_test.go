package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSBOM checks the document's shape: SPDX 2.3, one package per image, binary, module and
// Debian package (a module two binaries link is listed once), every SPDXID unique and every
// relationship between listed elements, purls escaped, go.sum hashes as SHA-256 checksums.
func TestSBOM(t *testing.T) {
	// The sum is the empty string's SHA-256, e3b0c442…, in base64.
	shared := goModule{Path: "github.com/bmc-toolbox/bmclib/v2", Version: "v2.3.5", Sum: "h1:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="}
	main := goModule{Path: "palisade.dev/palisade", Version: "(devel)"}
	in := sbomInput{
		Image: "palisade-agent", Version: "v1.2.3", Revision: "abc", Source: "https://example.com/x",
		Created: time.Unix(1700000000, 0),
		Binaries: []goBinary{
			{Name: "palisade-agent", GoVersion: "go1.26.8", Main: main, Deps: []goModule{shared}},
			{Name: "palisade-executor", GoVersion: "go1.26.8", Main: main, Deps: []goModule{shared}},
		},
		Digests: map[string]string{"palisade-agent": "aa", "palisade-executor": "bb"},
		Debs: []debPackage{{Name: "busybox-static", Version: "1:1.35.0-4+deb12u1+b1", Architecture: "amd64", SHA256: "cc",
			Control: []byte("Package: busybox-static\nSource: busybox (1:1.35.0-4+deb12u1)\nDescription: Standalone rescue shell\n more\n")}},
		Distro: "debian-12",
	}
	out, err := newSBOM(in)
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDocument
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" ||
		doc.CreationInfo.Created != "2023-11-14T22:13:20Z" || doc.DocumentNamespace == "" {
		t.Errorf("document header: %+v %+v", doc, doc.CreationInfo)
	}
	byName := map[string]spdxPackage{}
	ids := map[string]bool{"SPDXRef-DOCUMENT": true}
	var names []string
	for _, p := range doc.Packages {
		if ids[p.SPDXID] {
			t.Errorf("SPDXID %s used twice", p.SPDXID)
		}
		ids[p.SPDXID] = true
		byName[p.Name] = p
		names = append(names, p.Name+" "+p.PrimaryPackagePurpose)
	}
	wantNames := []string{"palisade-agent CONTAINER", "palisade-agent APPLICATION", "palisade.dev/palisade LIBRARY",
		"stdlib LIBRARY", "github.com/bmc-toolbox/bmclib/v2 LIBRARY", "palisade-executor APPLICATION", "busybox-static LIBRARY"}
	if diff := cmp.Diff(wantNames, names); diff != "" {
		t.Errorf("packages (-want +got):\n%s", diff)
	}
	for _, r := range doc.Relationships {
		if !ids[r.Element] || !ids[r.Related] {
			t.Errorf("relationship %+v names an element not in the document", r)
		}
	}
	checks := []struct {
		name, purl, checksum string
	}{
		{"busybox-static", "pkg:deb/debian/busybox-static@1%3A1.35.0-4%2Bdeb12u1%2Bb1?arch=amd64&distro=debian-12", "cc"},
		{"github.com/bmc-toolbox/bmclib/v2", "pkg:golang/github.com/bmc-toolbox/bmclib/v2@v2.3.5",
			"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"stdlib", "pkg:golang/stdlib@go1.26.8", ""},
	}
	for _, c := range checks {
		p := byName[c.name]
		if len(p.ExternalRefs) != 1 || p.ExternalRefs[0].ReferenceLocator != c.purl {
			t.Errorf("%s: external refs %+v, want the purl %s", c.name, p.ExternalRefs, c.purl)
		}
		if c.checksum != "" && (len(p.Checksums) != 1 || p.Checksums[0].Algorithm != "SHA256" || p.Checksums[0].ChecksumValue != c.checksum) {
			t.Errorf("%s: checksums %+v, want SHA256 %s", c.name, p.Checksums, c.checksum)
		}
	}
	if got := byName["busybox-static"].Comment; got != "architecture amd64, source package busybox (1:1.35.0-4+deb12u1)" {
		t.Errorf("busybox-static's comment = %q", got)
	}
	if got := byName["palisade.dev/palisade"]; got.DownloadLocation != noAssertion || got.VersionInfo != "v1.2.3" {
		t.Errorf("the main module: download location %q, version %q; want %s (it is on no proxy), the image's v1.2.3",
			got.DownloadLocation, got.VersionInfo, noAssertion)
	}

	again, err := newSBOM(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(out) {
		t.Error("the same input gave another SBOM")
	}
}
