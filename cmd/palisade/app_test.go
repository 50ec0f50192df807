package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/tools/clientcmd"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// The command line: usage, help, unknown commands and flags, and the name the tool has when
// kubectl runs it as a plugin.
func TestCommandLine(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		out, err []string // what stdout and stderr say
	}{
		{"no command", nil, exitUsage, nil, []string{"usage: palisade [--kubeconfig FILE] [--context NAME] COMMAND"}},
		{"help", []string{"help"}, exitOK, []string{"commands:", "status [-o wide|json|yaml]", "explain NODE",
			"fence NODE --reason TEXT [--yes]", "unfence NODE --reason TEXT [--yes]", "completion bash|zsh"}, nil},
		{"--help", []string{"--help"}, exitOK, []string{"usage: palisade"}, nil},
		{"help of a command", []string{"help", "unfence"}, exitOK, []string{"usage: palisade unfence NODE --reason TEXT [--yes]"}, nil},
		{"-h of a command", []string{"fence", "-h"}, exitOK, []string{"usage: palisade fence NODE --reason TEXT [--yes] [--allow-dry-run]"}, nil},
		{"unknown command", []string{"fencee", "node-1"}, exitUsage, nil, []string{`palisade: unknown command "fencee"`, "commands:"}},
		{"help of an unknown command", []string{"help", "nope"}, exitUsage, nil, []string{`unknown command "nope"`}},
		{"unknown flag", []string{"explain", "node-1", "--reasn", "x"}, exitUsage, nil,
			[]string{"flag provided but not defined: -reasn", "usage: palisade explain NODE"}},
		{"no node", []string{"explain"}, exitUsage, nil, []string{"explain needs the name of a node"}},
		{"two nodes", []string{"fence", "a", "b", "--reason", "x"}, exitUsage, nil, []string{"fence takes one node, got 2 arguments: a b"}},
		{"status arguments", []string{"status", "node-1"}, exitUsage, nil, []string{"status takes no arguments"}},
		{"completion without shell", []string{"completion"}, exitUsage, nil, []string{"completion needs one shell: bash or zsh"}},
		{"completion of fish", []string{"completion", "fish"}, exitUsage, nil, []string{`no completion for shell "fish"`}},
		{"the old demo", []string{"demo"}, exitError, nil, []string{`run "make demo" in a checkout`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, nil, "", tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d: %s", r.code, tc.code, r)
			}
			wantContains(t, "stdout", r.out, tc.out...)
			wantContains(t, "stderr", r.errOut, tc.err...)
		})
	}
	t.Run("as a kubectl plugin", func(t *testing.T) {
		for _, argv0 := range []string{"/usr/local/bin/kubectl-palisade", "kubectl-palisade.exe"} {
			a := newApp(argv0, strings.NewReader(""), &strings.Builder{}, &strings.Builder{})
			if a.name != "kubectl palisade" || a.completer {
				t.Errorf("run as %s: name %q, completer %t", argv0, a.name, a.completer)
			}
		}
		if a := newApp("/home/me/.krew/bin/kubectl_complete-palisade", nil, nil, nil); !a.completer {
			t.Error("kubectl_complete-palisade does not answer completions")
		}
	})
}

// Errors say how to point the tool at a cluster, and which permission is missing.
func TestFriendlyErrors(t *testing.T) {
	cl := testCluster(t)
	c := cl.Client
	sel := map[string]string{"palisade-cli-test": "errors"}
	makePolicy(t, c, "errors", sel, nil, nil)
	makeNode(t, c, nodeSpec{name: "errors-1", labels: sel, ready: corev1.ConditionTrue})
	dir := t.TempDir()

	t.Run("no kubeconfig", func(t *testing.T) {
		t.Setenv("KUBECONFIG", filepath.Join(dir, "missing"))
		t.Setenv("HOME", dir)
		t.Setenv("KUBERNETES_SERVICE_HOST", "")
		r := runCLI(t, nil, "", "status")
		if r.code != exitError {
			t.Fatalf("status without a kubeconfig: %s", r)
		}
		wantContains(t, "the error", r.errOut, "no cluster to talk to: no kubeconfig found",
			"Point at a cluster with --kubeconfig FILE or KUBECONFIG=FILE", "--context NAME")
	})
	t.Run("unknown context", func(t *testing.T) {
		r := runCLI(t, nil, "", "explain", "errors-1", "--kubeconfig", cl.KubeconfigPath(), "--context", "nope")
		if r.code != exitError {
			t.Fatalf("explain with an unknown context: %s", r)
		}
		wantContains(t, "the error", r.errOut, `context "nope" is not in the kubeconfig (`+"`kubectl config get-contexts`"+` lists the contexts)`)
	})
	t.Run("unreachable API server", func(t *testing.T) {
		cfg, err := clientcmd.LoadFromFile(cl.KubeconfigPath())
		if err != nil {
			t.Fatal(err)
		}
		for _, cluster := range cfg.Clusters {
			cluster.Server = "https://127.0.0.1:1"
		}
		path := filepath.Join(dir, "unreachable.kubeconfig")
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			t.Fatal(err)
		}
		r := runCLI(t, nil, "", "--kubeconfig", path, "explain", "errors-1")
		if r.code != exitError {
			t.Fatalf("explain against a closed port: %s", r)
		}
		wantContains(t, "the error", r.errOut, "cannot reach the API server (reading nodes errors-1)", "Check the kubeconfig context (--context)")
	})
	t.Run("RBAC", func(t *testing.T) {
		grant(t, c, "viewer", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}})
		r := runCLI(t, as(t, cl, "viewer"), "", "explain", "errors-1")
		if r.code != exitError {
			t.Fatalf("explain without the right to list policies: %s", r)
		}
		wantContains(t, "the error", r.errOut,
			"permission missing: you may not list fencingpolicies.fencing.palisade.dev cluster-wide",
			`grants verb "list" on resource "fencingpolicies" of API group fencing.palisade.dev cluster-wide`,
			"(check with: kubectl auth can-i list fencingpolicies.fencing.palisade.dev)",
			`User "viewer" cannot list resource "fencingpolicies"`)
	})
	t.Run("RBAC on Leases only", func(t *testing.T) {
		grant(t, c, "operator",
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
			rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"fencingpolicies", "nodefences"}, Verbs: []string{"get", "list"}})
		r := runCLI(t, as(t, cl, "operator"), "", "explain", "errors-1")
		if r.code != exitOK {
			t.Fatalf("explain without the right to read Leases: %s", r)
		}
		wantContains(t, "explain", r.out,
			"Lease: could not be read: permission missing: you may not get leases.coordination.k8s.io errors-1 in namespace kube-node-lease",
			"kubectl auth can-i get leases.coordination.k8s.io -n kube-node-lease",
			"errors-1 is healthy: not fenced")
	})
}

// The test binary run as the CLI under other names: the plugin's usage, and kubectl's plugin
// completion helper answering from the cluster.
func TestRunAsPlugin(t *testing.T) {
	cl := testCluster(t)
	makeNode(t, cl.Client, nodeSpec{name: "plugin-node-1", ready: corev1.ConditionTrue})
	bin := linkSelf(t, "kubectl-palisade", "kubectl_complete-palisade")
	out := runSelf(t, bin, nil, "kubectl-palisade", "help")
	wantContains(t, "kubectl-palisade help", out, "usage: kubectl palisade [--kubeconfig FILE] [--context NAME] COMMAND")
	out = runSelf(t, bin, []string{"KUBECONFIG=" + cl.KubeconfigPath()}, "kubectl_complete-palisade", "explain", "plugin-node")
	if out != "plugin-node-1\n:4\n" {
		t.Errorf("kubectl_complete-palisade explain plugin-node printed %q, want the node and :4", out)
	}
}

// linkSelf links names to the test binary in a directory of their own, which it returns.
func linkSelf(t *testing.T, names ...string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, n := range names {
		if err := os.Symlink(self, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
