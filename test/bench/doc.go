// Package bench measures failover on the real test bed: Palisade against vanilla Kubernetes
// with an ideal operator who adds the out-of-service taint the moment the node turns NotReady.
// Run it with `make bench`; it prints BENCH lines.
package bench
