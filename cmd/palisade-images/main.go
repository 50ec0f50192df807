package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// defaultSource is the repository the images are built from (the krew manifest's homepage).
const defaultSource = "https://github.com/palisade-dev/palisade"

func main() {
	if err := runMain(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "palisade-images:", err)
		os.Exit(1)
	}
}

func runMain(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	o, err := parseFlags(ctx, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := lookTools(); err != nil {
		return err
	}
	start := time.Now()
	images, err := build(ctx, o)
	if err != nil {
		return err
	}
	for _, b := range images {
		fmt.Printf("%s  %s  %d bytes\n  image ID %s\n  digest   %s\n  SBOM     %s\n", b.Ref, b.Tarball, b.Size, b.ImageID, b.Digest, b.SBOM)
	}
	fmt.Printf("built in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

func parseFlags(ctx context.Context, args []string) (options, error) {
	var o options
	var epoch string
	fs := flag.NewFlagSet("palisade-images", flag.ContinueOnError)
	fs.StringVar(&o.Version, "version", "", "the images' tag and version label (default: git describe --tags --always --dirty)")
	fs.StringVar(&o.Revision, "revision", "", "the revision label (default: git rev-parse HEAD)")
	fs.StringVar(&epoch, "source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "Unix time of every file and of the images' creation (default $SOURCE_DATE_EPOCH, else the last commit's time)")
	fs.StringVar(&o.Source, "source", defaultSource, "the source label")
	fs.StringVar(&o.Licenses, "licenses", "", "the licenses label, an SPDX expression; required once the module has a LICENSE file, left out while it has none")
	fs.StringVar(&o.ModuleDir, "module", ".", "the module's root directory")
	fs.StringVar(&o.OutDir, "out", "bin/images", "directory of the tarballs and SBOMs")
	fs.StringVar(&o.CacheDir, "cache", defaultCache(), "directory keeping the downloaded Debian packages")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.Specs = specs
	var err error
	if o.ModuleDir, err = filepath.Abs(o.ModuleDir); err != nil {
		return o, err
	}
	if err := o.fillFromGit(ctx, epoch); err != nil {
		return o, err
	}
	return o, o.checkLicenses()
}

// fillFromGit fills the version, the revision and the epoch the flags left empty from git.
func (o *options) fillFromGit(ctx context.Context, epoch string) error {
	git := func(args ...string) (string, error) {
		out, err := run(ctx, o.ModuleDir, "git", args...)
		return strings.TrimSpace(string(out)), err
	}
	var err error
	if o.Version == "" {
		if o.Version, err = git("describe", "--tags", "--always", "--dirty"); err != nil {
			return fmt.Errorf("finding the version (or set -version): %w", err)
		}
	}
	if o.Revision == "" {
		if o.Revision, err = git("rev-parse", "HEAD"); err != nil {
			return fmt.Errorf("finding the revision (or set -revision): %w", err)
		}
	}
	if epoch == "" {
		if epoch, err = git("log", "-1", "--format=%ct"); err != nil {
			return fmt.Errorf("finding the last commit's time (or set -source-date-epoch): %w", err)
		}
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil || secs < 0 {
		return fmt.Errorf("-source-date-epoch %q is not a Unix time", epoch)
	}
	o.Epoch = time.Unix(secs, 0).UTC()
	return nil
}

// checkLicenses refuses to build images of a licensed module without their licenses label.
func (o *options) checkLicenses() error {
	if o.Licenses != "" {
		return nil
	}
	found, _ := filepath.Glob(filepath.Join(o.ModuleDir, "LICENSE*"))
	if more, _ := filepath.Glob(filepath.Join(o.ModuleDir, "COPYING*")); len(more) > 0 {
		found = append(found, more...)
	}
	if len(found) > 0 {
		return fmt.Errorf("%s exists: set -licenses (make images LICENSES=...) to its SPDX expression", found[0])
	}
	return nil
}

// defaultCache is $PALISADE_CACHE/images, as the Makefile sets it, else ~/.cache/palisade/images.
func defaultCache() string {
	if c := os.Getenv("PALISADE_CACHE"); c != "" {
		return filepath.Join(c, "images")
	}
	if c, err := os.UserCacheDir(); err == nil {
		return filepath.Join(c, "palisade", "images")
	}
	return filepath.Join(os.TempDir(), "palisade-images-cache")
}

// lookTools fails early, with the fix, when a tool the build runs is missing.
func lookTools() error {
	for _, t := range []string{"go", "apt-cache", "apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("finding %s (the build needs Go, apt and dpkg-deb): %w", t, err)
		}
	}
	return nil
}
