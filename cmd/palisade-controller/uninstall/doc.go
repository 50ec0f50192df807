// Package uninstall is what `palisade-controller uninstall` does, run by the chart's pre-delete
// hook before helm uninstall deletes the release: it stops the controller (its Deployment scaled
// to 0, its pods gone) so that nothing puts back what it removes, then removes Palisade's
// finalizer palisade.dev/fence-on-delete and its annotation palisade.dev/agent (the mark of a
// node whose agent the controller heard) from every node, and deletes what the controller
// created at run time, which Helm does not own: the agents' CA Secret and ConfigMap and the
// controller's Leases, each by name. It changes no NodeFence and no out-of-service taint: a
// fenced node stays fenced, and the log says which. Every step can run again; a second run
// finishes what a failed one left.
package uninstall
