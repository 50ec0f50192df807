// Package demo is `make demo`: a node's power cut on three real machines, and the timeline of
// Palisade fencing it and moving its database pod, printed as the test runs (go test -v). It
// runs in `make test` as well, so that the demo cannot rot.
package demo
