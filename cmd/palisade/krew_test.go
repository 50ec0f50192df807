package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"text/template"

	"sigs.k8s.io/yaml"
)

// krewPlugin is the part of krew's Plugin (krew.googlecontainertools.github.com/v1alpha2) the
// manifest must get right.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			Sha256 string `json:"sha256"`
			Bin    string `json:"bin"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
		} `json:"platforms"`
	} `json:"spec"`
}

// The krew manifest, rendered as the release renders it (krew-release-bot's template: the
// tag, and each platform's archive URL and checksum), is a krew Plugin named palisade that
// installs kubectl-palisade on linux/amd64 and linux/arm64.
func TestKrewManifest(t *testing.T) {
	raw, err := os.ReadFile("krew/palisade.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const tag = "v1.2.3"
	var uris []string
	tmpl, err := template.New("krew").Funcs(template.FuncMap{
		// As krew-release-bot's: the URL is itself a template of the tag; the checksum is
		// that of the archive the release uploaded (here, of its URL).
		"addURIAndSha": func(url, tag string) (string, error) {
			var u bytes.Buffer
			if err := template.Must(template.New("uri").Parse(url)).Execute(&u, map[string]string{"TagName": tag}); err != nil {
				return "", err
			}
			uris = append(uris, u.String())
			sum := sha256.Sum256(u.Bytes())
			return fmt.Sprintf("uri: %s\n    sha256: %s", u.String(), hex.EncodeToString(sum[:])), nil
		},
	}).Parse(string(raw))
	if err != nil {
		t.Fatalf("parsing the manifest's template: %v", err)
	}
	var rendered bytes.Buffer
	if err := tmpl.Execute(&rendered, map[string]string{"TagName": tag}); err != nil {
		t.Fatalf("rendering the manifest: %v", err)
	}
	var p krewPlugin
	if err := yaml.UnmarshalStrict(rendered.Bytes(), &p); err != nil {
		t.Fatalf("the rendered manifest is not a krew Plugin: %v\n%s", err, rendered.String())
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "palisade" {
		t.Errorf("apiVersion %q kind %q name %q, want krew.googlecontainertools.github.com/v1alpha2 Plugin palisade", p.APIVersion, p.Kind, p.Metadata.Name)
	}
	if p.Spec.Version != tag || p.Spec.ShortDescription == "" || p.Spec.Description == "" || p.Spec.Homepage == "" {
		t.Errorf("version %q (want %s), shortDescription %q, description and homepage must be set", p.Spec.Version, tag, p.Spec.ShortDescription)
	}
	want := map[string]bool{"linux/amd64": false, "linux/arm64": false}
	hexSum := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for i, pl := range p.Spec.Platforms {
		key := pl.Selector.MatchLabels["os"] + "/" + pl.Selector.MatchLabels["arch"]
		seen, ok := want[key]
		if !ok || seen {
			t.Errorf("platform %d: %s is not wanted or listed twice", i, key)
		}
		want[key] = true
		if pl.Bin != "kubectl-palisade" {
			t.Errorf("%s: bin %q, want kubectl-palisade", key, pl.Bin)
		}
		arch := strings.ReplaceAll(key, "/", "_")
		if !strings.HasPrefix(pl.URI, "https://") || !strings.Contains(pl.URI, tag) || !strings.HasSuffix(pl.URI, arch+".tar.gz") {
			t.Errorf("%s: uri %q is not the release's %s archive", key, pl.URI, arch)
		}
		if !hexSum.MatchString(pl.Sha256) {
			t.Errorf("%s: sha256 %q is not a checksum", key, pl.Sha256)
		}
		if len(pl.Files) == 0 || pl.Files[0].From != "kubectl-palisade" {
			t.Errorf("%s: files %+v do not install kubectl-palisade", key, pl.Files)
		}
	}
	for key, seen := range want {
		if !seen {
			t.Errorf("no platform %s", key)
		}
	}
	if len(uris) != 2 {
		t.Errorf("the manifest asks the release for %d archives, want 2", len(uris))
	}
}
