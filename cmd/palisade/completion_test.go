package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// __complete answers the completion scripts (and kubectl's plugin completion) from the words
// typed so far: commands, flags, output formats, contexts and the cluster's node names.
func TestComplete(t *testing.T) {
	cl := testCluster(t)
	c := cl.Client
	for _, n := range []string{"complete-a", "complete-b", "other-c"} {
		makeNode(t, c, nodeSpec{name: n, ready: corev1.ConditionTrue})
	}
	tests := []struct {
		words []string
		want  string
	}{
		{[]string{""}, "status\nexplain\nfence\nunfence\ncompletion\nhelp\n:4\n"},
		{[]string{"f"}, "fence\n:4\n"},
		{[]string{"--context", "x", "un"}, "unfence\n:4\n"},
		{[]string{"fence", "complete-"}, "complete-a\ncomplete-b\n:4\n"},
		{[]string{"explain", "--kubeconfig=/dev/null", "other"}, "other-c\n:4\n"},
		{[]string{"unfence", "complete-a", ""}, ":4\n"},
		{[]string{"fence", "--"}, "--reason\n--yes\n--allow-dry-run\n--kubeconfig\n--context\n:4\n"},
		{[]string{"fence", "complete-a", "--reason", ""}, ":4\n"},
		{[]string{"status", "-o", ""}, "wide\njson\nyaml\n:4\n"},
		{[]string{"status", "--output", "y"}, "yaml\n:4\n"},
		{[]string{"status", "--k"}, "--kubeconfig\n:4\n"},
		{[]string{"--kubeconfig", ""}, ":0\n"},
		{[]string{"completion", ""}, "bash\nzsh\n:4\n"},
		{[]string{"help", "e"}, "explain\n:4\n"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.words, " "), func(t *testing.T) {
			r := runCLI(t, c, "", append([]string{completeVerb}, tc.words...)...)
			if r.code != exitOK {
				t.Fatalf("__complete: %s", r)
			}
			if diff := cmp.Diff(tc.want, r.out); diff != "" {
				t.Errorf("__complete %q (-want +got):\n%s", tc.words, diff)
			}
		})
	}
	t.Run("contexts of the kubeconfig", func(t *testing.T) {
		r := runCLI(t, nil, "", completeVerb, "--kubeconfig", cl.KubeconfigPath(), "explain", "--context", "")
		if r.code != exitOK || !strings.HasSuffix(r.out, ":4\n") || strings.Count(r.out, "\n") < 2 {
			t.Errorf("__complete of --context lists no context: %s", r)
		}
	})
}

// The scripts mention every command, are valid shell, and bash completes through the tool.
func TestCompletionScripts(t *testing.T) {
	for _, shell := range []string{"bash", "zsh"} {
		r := runCLI(t, nil, "", "completion", shell)
		if r.code != exitOK {
			t.Fatalf("completion %s: %s", shell, r)
		}
		wantContains(t, shell+" completion", r.out, "status explain fence unfence completion help", "__complete", "palisade kubectl-palisade")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to run the script")
	}
	r := runCLI(t, nil, "", "completion", "bash")
	script := filepath.Join(t.TempDir(), "palisade.bash")
	if err := os.WriteFile(script, []byte(r.out), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bash, "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}

	cl := testCluster(t)
	makeNode(t, cl.Client, nodeSpec{name: "bash-node-1", ready: corev1.ConditionTrue})
	makeNode(t, cl.Client, nodeSpec{name: "bash-node-2", ready: corev1.ConditionTrue})
	bin := linkSelf(t, "palisade")
	complete := func(words ...string) string {
		t.Helper()
		// What bash does on TAB: COMP_WORDS holds the line's words, the last the one completed.
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		cmd := "source " + script + "; COMP_WORDS=(" + strings.Join(quoted, " ") + "); COMP_CWORD=" +
			strconv.Itoa(len(words)-1) + "; _palisade_complete; printf '%s\\n' \"${COMPREPLY[@]}\""
		return runShell(t, bash, bin, []string{"KUBECONFIG=" + cl.KubeconfigPath()}, cmd)
	}
	if got := complete("palisade", "un"); got != "unfence\n" {
		t.Errorf("palisade un<TAB> = %q, want unfence", got)
	}
	if got := complete("palisade", "explain", "bash-node-"); got != "bash-node-1\nbash-node-2\n" {
		t.Errorf("palisade explain bash-node-<TAB> = %q, want both nodes", got)
	}
	if got := complete("palisade", "status", "-o", "j"); got != "json\n" {
		t.Errorf("palisade status -o j<TAB> = %q, want json", got)
	}
}

// runShell runs script in shell with bin first on PATH, the test binary there running as the
// CLI; it returns stdout.
func runShell(t *testing.T, shell, bin string, env []string, script string) string {
	t.Helper()
	cmd := exec.Command(shell, "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), runAsCLI+"=1")
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s -c %q: %v\n%s", shell, script, err, stderr.String())
	}
	return string(out)
}

// runSelf runs the test binary as the CLI under name (a link in bin) and returns its stdout.
func runSelf(t *testing.T, bin string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Env = append(append(os.Environ(), runAsCLI+"=1"), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}
