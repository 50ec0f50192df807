package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const completionUsage = `usage: %[1]s completion bash|zsh

Prints a shell completion script: it completes the commands, their flags, output formats,
kubeconfig contexts and node names (read from the cluster by this tool, through its hidden
__complete command). Load it with:
  bash:  source <(%[1]s completion bash)   (or save it in /etc/bash_completion.d/palisade)
  zsh:   source <(%[1]s completion zsh)    (or save it as _palisade in a directory of $fpath)
The script completes the commands palisade and kubectl-palisade. For "kubectl palisade <TAB>",
kubectl (1.26+) asks an executable named kubectl_complete-palisade on your PATH: make it a
symlink to this binary, which then answers as __complete does.
`

// completeVerb is the hidden command the completion scripts call: its arguments are the words
// after the tool's name, the last one the word being completed; it prints the candidates one a
// line, then ":<directive>" (cobra's convention, which kubectl's plugin completion reads).
const completeVerb = "__complete"

// Completion directives (cobra's ShellCompDirective values).
const (
	compDefault = 0 // the shell may complete file names
	compNoFile  = 4 // no file names
)

// nodeListTimeout bounds the listing of node names for a completion.
const nodeListTimeout = 5 * time.Second

func (a *app) completionCmd(args []string) error {
	if len(args) != 1 {
		return usagef("completion", "completion needs one shell: bash or zsh")
	}
	switch args[0] {
	case "bash":
		fmt.Fprintf(a.out, bashCompletion, a.name, strings.Join(verbs, " "))
	case "zsh":
		fmt.Fprintf(a.out, zshCompletion, a.name, strings.Join(verbs, " "))
	default:
		return usagef("completion", "no completion for shell %q: bash or zsh", args[0])
	}
	return nil
}

func (a *app) completeCmd(ctx context.Context, words []string) error {
	cands, directive := a.complete(ctx, words)
	for _, c := range cands {
		fmt.Fprintln(a.out, c)
	}
	fmt.Fprintf(a.out, ":%d\n", directive)
	return nil
}

// flagsOf are the flags each command takes (global: before any command).
var flagsOf = map[string][]string{
	"":        {"--kubeconfig", "--context"},
	"status":  {"--output", "-o", "--kubeconfig", "--context"},
	"explain": {"--kubeconfig", "--context"},
	"fence":   {"--reason", "--yes", "--allow-dry-run", "--kubeconfig", "--context"},
	"unfence": {"--reason", "--yes", "--kubeconfig", "--context"},
}

// valueFlags are the flags that take a value (without the dashes).
var valueFlags = map[string]bool{"kubeconfig": true, "context": true, "reason": true, "o": true, "output": true}

// complete returns the candidates for the last of words and the directive.
func (a *app) complete(ctx context.Context, words []string) ([]string, int) {
	if len(words) == 0 {
		words = []string{""}
	}
	cur, before := words[len(words)-1], words[:len(words)-1]
	var kf kubeFlags
	var verb, pending string
	positional := 0
	for _, w := range before {
		if pending != "" {
			kf.set(pending, w)
			pending = ""
			continue
		}
		if strings.HasPrefix(w, "-") {
			name, val, hasVal := strings.Cut(strings.TrimLeft(w, "-"), "=")
			switch {
			case valueFlags[name] && hasVal:
				kf.set(name, val)
			case valueFlags[name]:
				pending = name
			}
			continue
		}
		if verb == "" {
			verb = w
		} else {
			positional++
		}
	}
	switch {
	case pending != "":
		return a.completeValue(pending, cur, kf)
	case strings.HasPrefix(cur, "-"):
		return withPrefix(flagsOf[verb], cur), compNoFile
	case verb == "":
		return withPrefix(verbs, cur), compNoFile
	case positional > 0:
		return nil, compNoFile
	}
	switch verb {
	case "fence", "unfence", "explain":
		return withPrefix(a.nodeNames(ctx, kf), cur), compNoFile
	case "completion":
		return withPrefix([]string{"bash", "zsh"}, cur), compNoFile
	case "help":
		return withPrefix(verbs[:len(verbs)-1], cur), compNoFile
	}
	return nil, compNoFile
}

// completeValue completes the value of flag.
func (a *app) completeValue(flag, cur string, kf kubeFlags) ([]string, int) {
	switch flag {
	case "o", "output":
		return withPrefix([]string{"wide", "json", "yaml"}, cur), compNoFile
	case "context":
		raw, err := kf.clientConfig().RawConfig()
		if err != nil {
			return nil, compNoFile
		}
		var names []string
		for name := range raw.Contexts {
			names = append(names, name)
		}
		sort.Strings(names)
		return withPrefix(names, cur), compNoFile
	case "kubeconfig":
		return nil, compDefault
	}
	return nil, compNoFile
}

// nodeNames lists the cluster's nodes; nothing when it cannot.
func (a *app) nodeNames(ctx context.Context, kf kubeFlags) []string {
	c, err := a.connect(kf)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, nodeListTimeout)
	defer cancel()
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil
	}
	names := make([]string, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	return names
}

func (f *kubeFlags) set(name, value string) {
	switch name {
	case "kubeconfig":
		f.kubeconfig = value
	case "context":
		f.context = value
	}
}

func withPrefix(all []string, prefix string) []string {
	var out []string
	for _, s := range all {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// bashCompletion is the bash script (%[1]s: the tool's name, %[2]s: its commands, which it
// completes by itself when the tool cannot answer).
const bashCompletion = `# bash completion for %[1]s: commands, flags, contexts and node names.
# Load it with: source <(%[1]s completion bash)
_palisade_complete() {
    local cur="${COMP_WORDS[COMP_CWORD]}" out line directive=0
    local -a cands=()
    if ! out=$("${COMP_WORDS[0]}" __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null); then
        (( COMP_CWORD == 1 )) && COMPREPLY=( $(compgen -W "%[2]s" -- "$cur") )
        return 0
    fi
    while IFS= read -r line; do
        case "$line" in
            :*) directive="${line#:}" ;;
            "") ;;
            *) cands+=("$line") ;;
        esac
    done <<< "$out"
    if (( ${#cands[@]} )); then
        COMPREPLY=( $(compgen -W "${cands[*]}" -- "$cur") )
    elif (( (directive & 4) == 0 )); then
        compopt -o filenames 2>/dev/null
        COMPREPLY=( $(compgen -f -- "$cur") )
    fi
    return 0
}
complete -F _palisade_complete palisade kubectl-palisade
`

// zshCompletion is the zsh script (%[1]s: the tool's name, %[2]s: its commands, which it
// completes by itself when the tool cannot answer).
const zshCompletion = `#compdef palisade kubectl-palisade
# zsh completion for %[1]s: commands, flags, contexts and node names.
# Load it with: source <(%[1]s completion zsh)
_palisade() {
    local -a lines cands
    local out line directive=0
    if ! out="$("${words[1]}" __complete "${(@)words[2,CURRENT]}" 2>/dev/null)"; then
        (( CURRENT == 2 )) && compadd -- %[2]s
        return
    fi
    lines=("${(@f)out}")
    for line in "${lines[@]}"; do
        case "$line" in
            :*) directive="${line#:}" ;;
            '') ;;
            *) cands+=("$line") ;;
        esac
    done
    if (( ${#cands} )); then
        compadd -- "${cands[@]}"
    elif (( (directive & 4) == 0 )); then
        _files
    fi
}
if [ "$funcstack[1]" = "_palisade" ]; then
    _palisade "$@"
else
    compdef _palisade palisade kubectl-palisade
fi
`
