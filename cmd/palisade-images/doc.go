// Command palisade-images is a build tool for `make images`, shipped in no image. It builds
// the OCI images palisade.dev/palisade-controller:<version> and
// palisade.dev/palisade-agent:<version> without a registry or a daemon: it builds the
// binaries (static, -trimpath, no build ID), installs Debian packages by unpacking the .debs
// apt-get download fetches (cached by version) with dpkg-deb, assembles the layers itself
// with go-containerregistry, and writes each image as a docker-archive tarball (which docker
// load and ctr images import accept) with its SPDX 2.3 SBOM beside it.
//
// The controller's image holds ipmitool (bmclib's IPMI provider runs it) with the closure of
// its Depends and Pre-Depends, less the packages that serve only dpkg's maintainer scripts
// (denied), the CA bundle ca-certificates' postinst would write, and runs as 65532
// ("nonroot"). The agent's holds palisade-executor beside the agent and Debian's static
// busybox as /bin/sh and nsenter (its --kubelet-stop-command), and runs as root.
//
// The images are reproducible: every time in them is -source-date-epoch, every layer's
// entries are sorted and owned by numbers, so that the same sources and packages give the
// same digests. Each image carries the OCI labels and its SBOM at
// /usr/share/palisade/sbom.spdx.json: the Go modules of each binary (from its build
// information) and the Debian packages (from their control files).
package main
