package main

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// sbomPath is where the image holds its own SBOM.
const sbomPath = "usr/share/palisade/sbom.spdx.json"

// SPDX 2.3 in JSON (https://spdx.github.io/spdx-spec/v2.3/), the fields used here.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name                  string            `json:"name"`
	SPDXID                string            `json:"SPDXID"`
	VersionInfo           string            `json:"versionInfo,omitempty"`
	Supplier              string            `json:"supplier,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	Checksums             []spdxChecksum    `json:"checksums,omitempty"`
	LicenseConcluded      string            `json:"licenseConcluded"`
	LicenseDeclared       string            `json:"licenseDeclared"`
	CopyrightText         string            `json:"copyrightText"`
	Summary               string            `json:"summary,omitempty"`
	Comment               string            `json:"comment,omitempty"`
	ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

const noAssertion = "NOASSERTION"

// sbomInput is what an image's SBOM lists.
type sbomInput struct {
	Image, Version, Revision, Source string
	Created                          time.Time
	// Binaries are the Go programs in the image, with their SHA-256 digests (hex) by name.
	Binaries []goBinary
	Digests  map[string]string
	Debs     []debPackage
	// Distro qualifies the Debian packages' purls: "debian-12".
	Distro string
}

// sbom is an SPDX 2.3 document describing the image: a package for the image, one for each Go
// binary it holds (which CONTAINS), one for each Go module linked into a binary (STATIC_LINK,
// the Go toolchain's standard library as "stdlib") and one for each Debian package in it.
type sbom struct {
	doc spdxDocument
	ids map[string]string // a package's key → its SPDXID
}

func newSBOM(in sbomInput) ([]byte, error) {
	s := &sbom{ids: map[string]string{}}
	imageID := s.add("image", spdxPackage{Name: in.Image, VersionInfo: in.Version, PrimaryPackagePurpose: "CONTAINER",
		DownloadLocation: noAssertion, Comment: "revision " + in.Revision + ", source " + in.Source})
	s.relate("SPDXRef-DOCUMENT", "DESCRIBES", imageID)
	for _, b := range in.Binaries {
		binID := s.add("binary:"+b.Name, spdxPackage{Name: b.Name, VersionInfo: in.Version, PrimaryPackagePurpose: "APPLICATION",
			DownloadLocation: noAssertion, Checksums: []spdxChecksum{{"SHA256", in.Digests[b.Name]}},
			Comment: "/usr/local/bin/" + b.Name + ", built by " + b.GoVersion + " from " + b.Main.Path})
		s.relate(imageID, "CONTAINS", binID)
		s.relate(binID, "STATIC_LINK", s.goModule(mainModule(b.Main, in.Version), false))
		for _, m := range append([]goModule{{Path: "stdlib", Version: b.GoVersion}}, b.Deps...) {
			s.relate(binID, "STATIC_LINK", s.goModule(m, m.Path != "stdlib"))
		}
	}
	for _, d := range in.Debs {
		s.relate(imageID, "CONTAINS", s.deb(d, in.Distro))
	}
	s.doc = spdxDocument{SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name: in.Image + "-" + in.Version, Packages: s.doc.Packages, Relationships: s.doc.Relationships,
		CreationInfo: spdxCreationInfo{Created: in.Created.UTC().Format(time.RFC3339), Creators: []string{"Organization: Palisade", "Tool: palisade-images"}}}
	content, err := json.Marshal(s.doc)
	if err != nil {
		return nil, fmt.Errorf("writing the SBOM of %s: %w", in.Image, err)
	}
	sum := sha256.Sum256(content)
	s.doc.DocumentNamespace = fmt.Sprintf("https://palisade.dev/spdx/%s/%s-%x", in.Image, in.Version, sum[:8])
	out, err := json.MarshalIndent(s.doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("writing the SBOM of %s: %w", in.Image, err)
	}
	return append(out, '\n'), nil
}

// add adds p under key once and returns its SPDXID.
func (s *sbom) add(key string, p spdxPackage) string {
	if id, ok := s.ids[key]; ok {
		return id
	}
	p.SPDXID = s.newID(key)
	if p.LicenseConcluded == "" {
		p.LicenseConcluded, p.LicenseDeclared, p.CopyrightText = noAssertion, noAssertion, noAssertion
	}
	s.ids[key] = p.SPDXID
	s.doc.Packages = append(s.doc.Packages, p)
	return p.SPDXID
}

var notIDChars = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// newID makes an SPDXID out of key (letters, digits, "." and "-"), unique in the document.
func (s *sbom) newID(key string) string {
	base := "SPDXRef-" + strings.Trim(notIDChars.ReplaceAllString(key, "-"), "-")
	id := base
	for i := 2; s.taken(id); i++ {
		id = fmt.Sprintf("%s-%d", base, i)
	}
	return id
}

func (s *sbom) taken(id string) bool {
	for _, p := range s.doc.Packages {
		if p.SPDXID == id {
			return true
		}
	}
	return false
}

func (s *sbom) relate(a, typ, b string) {
	s.doc.Relationships = append(s.doc.Relationships, spdxRelationship{a, typ, b})
}

// mainModule is the binary's main module, at the image's version when the build information
// has none ("(devel)": built with -buildvcs=false, or outside a repository).
func mainModule(m goModule, version string) goModule {
	if m.Version == "" || m.Version == "(devel)" {
		m.Version = version
	}
	return m
}

// goModule adds a Go module: its go.sum hash ("h1:" and base64 SHA-256) is its checksum; a
// module of the proxy is downloaded from there.
func (s *sbom) goModule(m goModule, proxied bool) string {
	p := spdxPackage{Name: m.Path, VersionInfo: m.Version, DownloadLocation: noAssertion, PrimaryPackagePurpose: "LIBRARY",
		ExternalRefs: []spdxExternalRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + purlPath(m.Path) + "@" + purlEscape(m.Version)}}}
	if h, ok := strings.CutPrefix(m.Sum, "h1:"); ok {
		if raw, err := base64.StdEncoding.DecodeString(h); err == nil && len(raw) == sha256.Size {
			p.Checksums = []spdxChecksum{{"SHA256", hex.EncodeToString(raw)}}
			p.Comment = "go.sum " + m.Sum
		}
	}
	if proxied && m.Version != "" && m.Version != "(devel)" {
		p.DownloadLocation = "https://proxy.golang.org/" + m.Path + "/@v/" + m.Version + ".zip"
	}
	return s.add("go:"+m.Path+"@"+m.Version, p)
}

// deb adds a Debian package: name, version and architecture from its control file.
func (s *sbom) deb(d debPackage, distro string) string {
	f := controlFields(d.Control)
	p := spdxPackage{Name: d.Name, VersionInfo: d.Version, Supplier: "Organization: Debian", DownloadLocation: noAssertion,
		PrimaryPackagePurpose: "LIBRARY", Checksums: []spdxChecksum{{"SHA256", d.SHA256}},
		Summary: f["Description"], Comment: "architecture " + d.Architecture + ", source package " + sourcePackage(d, f),
		ExternalRefs: []spdxExternalRef{{"PACKAGE-MANAGER", "purl",
			"pkg:deb/debian/" + purlEscape(d.Name) + "@" + purlEscape(d.Version) + "?arch=" + d.Architecture + "&distro=" + distro}}}
	return s.add("deb:"+d.Name, p)
}

// sourcePackage is the control file's Source ("glibc", "glibc (2.36-9)"), or the package
// itself when it has none.
func sourcePackage(d debPackage, f map[string]string) string {
	if src := f["Source"]; src != "" {
		return src
	}
	return d.Name
}

// purlPath escapes each segment of a slash-separated path for a purl.
func purlPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = purlEscape(s)
	}
	return strings.Join(segs, "/")
}

// purlEscape percent-encodes everything but the unreserved characters (a purl's version holds
// "+" and ":" encoded).
func purlEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
