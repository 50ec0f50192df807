package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The agent's dependency budget. It talks to the API server with net/http, never client-go (nor
// controller-runtime's client, cache or manager, which all import it; its small scheme package,
// which API types use, is fine), and the container runtime's clients (containerd, the CRI,
// gRPC, protobuf) are palisade-executor's alone: the agent reaches them through its child
// process (providers/executor/child and protocol, standard library only).
var (
	heavyPrefixes = []string{"k8s.io/client-go", "github.com/containerd/", "k8s.io/cri-api/", "k8s.io/cri-client/",
		"google.golang.org/grpc", "google.golang.org/protobuf/", "github.com/gogo/protobuf/", "k8s.io/api/"}
	heavyPackages = []string{"palisade.dev/palisade/providers/executor", "palisade.dev/palisade/providers/executor/node"}
)

// heavyDeps lists the dependencies of pkg over the budget.
func heavyDeps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var heavy []string
	for _, dep := range strings.Fields(string(out)) {
		over := slices.Contains(heavyPackages, dep)
		for _, p := range heavyPrefixes {
			over = over || strings.HasPrefix(dep, p) || dep == strings.TrimSuffix(p, "/")
		}
		if over {
			heavy = append(heavy, dep)
		}
	}
	return heavy
}

// TestAgentDependencyBudget guards the agent's memory budget: the binary links none of the
// Kubernetes clients nor the container runtime's.
func TestAgentDependencyBudget(t *testing.T) {
	for _, dep := range heavyDeps(t, "palisade.dev/palisade/cmd/palisade-agent") {
		t.Errorf("palisade-agent links %s", dep)
	}
}
