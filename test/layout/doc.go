// Package layout holds the tests of the repository's shape. The floors: which package may import
// which; from the top: cmd → fencing → providers → detectors → config (attach beside providers);
// nothing outside test/ imports test/. The troubleshooting page: every condition, step and Event
// reason the code sets has a row in README's Troubleshooting section, and every row's reason is
// still set. It has no product code.
package layout
