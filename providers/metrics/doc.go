// Package metrics wraps a providers.Fencer once with Prometheus metrics: the duration of every call
// (palisade_provider_duration_seconds) and its errors by reason
// (palisade_provider_errors_total), labelled by provider and method. Register adds the
// collectors to a registry, controller-runtime's from cmd/; the package registers nothing by
// itself.
package metrics
