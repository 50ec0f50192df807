// Command palisade is Palisade's command-line tool and kubectl plugin (installed as
// kubectl-palisade it is `kubectl palisade`). It shows the fencing policies and node fences of
// the cluster in the current kubeconfig context (status), says why a node is or is not being
// fenced (explain), asks Palisade to fence a node or confirms a fenced node clean through the
// request annotations the controller watches (fence, unfence: each says what will happen and
// asks first), and prints shell completion scripts. It talks to the API server only: it reads
// config/v1alpha1 and the Nodes and Leases (and, under a policy with workloads, the node's Pods
// and their claims, judged by the controller's own rule in config/v1alpha1), and never links the controller's fencing package
// (deps_test.go).
package main
