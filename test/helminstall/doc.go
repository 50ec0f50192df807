// Package helminstall installs the chart the way an operator does — Helm's Go SDK, the images
// make images builds, imported into each node's containerd — onto real machines (package
// realscene: real kubelets, containerd, kube-proxy, CoreDNS, ipmi_sim BMCs), and checks that the
// release runs and fences: the controller Deployment and the agent DaemonSet run as pods, the
// agents get their certificates through the CSR API and heartbeat to the leader through the
// Service, a machine's power cut is fenced by the installed release with at most one copy of
// the witness pod writing, and helm upgrade and helm uninstall leave nothing behind.
package helminstall
