// Package layout holds the test of the repository's floors: which package may import which.
// From the top: cmd → fencing → providers → detectors → config (attach beside providers);
// nothing outside test/ imports test/. It has no product code.
package layout
