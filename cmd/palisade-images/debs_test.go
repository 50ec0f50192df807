package main

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWalkDepends resolves closures from apt-cache depends' answers: ipmitool's on Debian 12
// (testdata), where the denied packages cut init-system-helpers (and with it perl and usrmerge)
// and readline-common's "dpkg | install-info" away, and small graphs for the rules.
func TestWalkDepends(t *testing.T) {
	bookworm, err := os.ReadFile("testdata/apt-depends-ipmitool.txt")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		out     string
		roots   []string
		want    []string
		wantErr string
	}{{
		name:  "ipmitool on Debian 12",
		out:   string(bookworm),
		roots: []string{"ipmitool"},
		want: []string{"freeipmi-common", "gcc-12-base", "ipmitool", "libc6", "libfreeipmi17", "libgcc-s1",
			"libgcrypt20", "libgpg-error0", "libreadline8", "libssl3", "libtinfo6", "readline-common"},
	}, {
		name:  "first alternative wins",
		out:   "a\n |Depends: b\n  Depends: c\nb\nc\n",
		roots: []string{"a"},
		want:  []string{"a", "b"},
	}, {
		name:  "a denied alternative falls to the next",
		out:   "a\n |Depends: dpkg\n  Depends: c\nc\ndpkg\n",
		roots: []string{"a"},
		want:  []string{"a", "c"},
	}, {
		name:  "a virtual package is met by its first provider that is not denied",
		out:   "a\n  Depends: <awk>\n    perl\n    mawk\nmawk\n  PreDepends: libc6\nlibc6\n<awk>\n",
		roots: []string{"a"},
		want:  []string{"a", "libc6", "mawk"},
	}, {
		name:  "a dependency whose every choice is denied is dropped",
		out:   "a\n |Depends: dpkg\n  Depends: install-info\n  Depends: <perl:any>\n    perl\n",
		roots: []string{"a"},
		want:  []string{"a"},
	}, {
		name:    "a virtual package nobody provides",
		out:     "a\n  Depends: <ghost>\n",
		roots:   []string{"a"},
		wantErr: "no installable package provides ghost",
	}, {
		name:    "a denied root",
		out:     "dpkg\n",
		roots:   []string{"dpkg"},
		wantErr: "package dpkg is denied",
	}, {
		name:    "an unknown root",
		out:     "a\n",
		roots:   []string{"b"},
		wantErr: "apt-cache knows no package b",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := walkDepends(parseDepends([]byte(tc.out)), tc.roots)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("closure (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDebFileName(t *testing.T) {
	got := debFileName(debPackage{Name: "busybox-static", Version: "1:1.35.0-4+deb12u1+b1", Architecture: "amd64"})
	if want := "busybox-static_1%3a1.35.0-4+deb12u1+b1_amd64.deb"; got != want {
		t.Errorf("debFileName = %q, want %q (as apt-get download names it)", got, want)
	}
}
