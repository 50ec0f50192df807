package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1 // an error, a refusal, or a question not answered yes
	exitUsage = 2 // an unknown command, flag or argument
)

// app is one run of the tool: its name as the user typed it, its streams and how it reaches
// the cluster. Tests build one with their own streams and connect.
type app struct {
	// name is "palisade", or "kubectl palisade" when run as the kubectl plugin (kubectl-palisade).
	name string
	// completer: run as kubectl_complete-palisade, kubectl's plugin completion helper.
	completer bool
	in        io.Reader
	out       io.Writer
	errOut    io.Writer
	// connect returns a client for the cluster the kubeconfig flags name.
	connect func(kubeFlags) (client.Client, error)
	now     func() time.Time
}

func newApp(argv0 string, in io.Reader, out, errOut io.Writer) *app {
	base := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	a := &app{name: "palisade", in: in, out: out, errOut: errOut, connect: connect, now: time.Now}
	if strings.HasPrefix(base, "kubectl-") || strings.HasPrefix(base, "kubectl_complete-") {
		a.name = "kubectl palisade"
	}
	a.completer = strings.HasPrefix(base, "kubectl_complete-")
	return a
}

// usages are the commands' usage texts (with %[1]s for the tool's name), by verb.
var usages = map[string]string{
	"status":     statusUsage,
	"explain":    explainUsage,
	"fence":      fenceUsage,
	"unfence":    unfenceUsage,
	"completion": completionUsage,
}

// dispatch runs verb with the arguments after it; ok is false for an unknown verb.
func (a *app) dispatch(ctx context.Context, verb string, kf *kubeFlags, args []string) (ok bool, err error) {
	switch verb {
	case "status":
		return true, a.statusCmd(ctx, kf, args)
	case "explain":
		return true, a.explainCmd(ctx, kf, args)
	case "fence":
		return true, a.fenceCmd(ctx, kf, args)
	case "unfence":
		return true, a.unfenceCmd(ctx, kf, args)
	case "completion":
		return true, a.completionCmd(args)
	case completeVerb:
		return true, a.completeCmd(ctx, args)
	case "demo":
		return true, errDemoMoved
	}
	return false, nil
}

// verbs are the commands a user sees, in the order of the usage text.
var verbs = []string{"status", "explain", "fence", "unfence", "completion", "help"}

const usage = `usage: %[1]s [--kubeconfig FILE] [--context NAME] COMMAND [ARGS] [FLAGS]

Palisade fences failed nodes so that their stateful pods run again elsewhere, never twice at
once. This tool shows and drives it in the cluster of the current kubeconfig context.

commands:
  status [-o wide|json|yaml]          the fencing policies, the nodes that look unhealthy, and
                                      every node fence with its latest step
  explain NODE                        why NODE is or is not being fenced, signal by signal and
                                      policy by policy, and a one-line verdict
  fence NODE --reason TEXT [--yes]    ask Palisade to fence NODE: says which policy and methods
                                      act and what is released, then asks
  unfence NODE --reason TEXT [--yes]  confirm a fenced NODE clean (it did not reboot, its reboot
                                      is not proven, or it is held as Flapping) so that Palisade
                                      gives it back
  completion bash|zsh                 print a shell completion script
  help [COMMAND]                      this text, or a command's

flags (before or after the command):
  --kubeconfig FILE  the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)
  --context NAME     the kubeconfig context (default: its current context)

Exit status: 0 done, 1 error, refusal or not confirmed, 2 bad usage.

The demo (cut a node's power on a real control plane and watch Palisade fence it) needs the
test bed and is not part of this tool: run "make demo" in a checkout.
`

// errDemoMoved answers "palisade demo", the verb of earlier versions.
var errDemoMoved = errors.New(`the demo is no longer part of the palisade CLI: it needs the test bed, ` +
	`so it is the test-only command test/cmd/palisade-demo; run "make demo" in a checkout`)

// usageError is a command line that cannot be run; verb names the command whose usage to show
// ("" for the tool's).
type usageError struct {
	verb, msg string
}

func (e *usageError) Error() string { return e.msg }

func usagef(verb, format string, args ...any) error {
	return &usageError{verb: verb, msg: fmt.Sprintf(format, args...)}
}

// run runs the command line args (without the program's name) and returns the exit status.
func (a *app) run(ctx context.Context, args []string) int {
	if a.completer {
		args = append([]string{completeVerb}, args...)
	}
	var kf kubeFlags
	global := newFlagSet()
	kf.register(global)
	err := global.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(a.out, usage, a.name)
		return exitOK
	case err != nil:
		return a.fail(usagef("", "%v", err))
	case global.NArg() == 0:
		fmt.Fprintf(a.errOut, usage, a.name)
		return exitUsage
	}
	verb, rest := global.Arg(0), global.Args()[1:]
	if verb == "help" {
		return a.help(rest)
	}
	ok, err := a.dispatch(ctx, verb, &kf, rest)
	if !ok {
		return a.fail(usagef("", "unknown command %q", verb))
	}
	return a.fail(err)
}

// help prints the tool's usage, or a command's.
func (a *app) help(args []string) int {
	if len(args) == 0 {
		fmt.Fprintf(a.out, usage, a.name)
		return exitOK
	}
	text, ok := usages[args[0]]
	if !ok {
		return a.fail(usagef("", "unknown command %q", args[0]))
	}
	fmt.Fprintf(a.out, text, a.name)
	return exitOK
}

// fail reports err, if any, and returns the exit status it calls for.
func (a *app) fail(err error) int {
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK // the command printed its usage
	case errors.As(err, &ue):
		text := fmt.Sprintf(usage, a.name)
		if u, ok := usages[ue.verb]; ok {
			text = fmt.Sprintf(u, a.name)
		}
		fmt.Fprintf(a.errOut, "%s: %s\n\n%s", a.name, ue.msg, text)
		return exitUsage
	}
	fmt.Fprintf(a.errOut, "%s: %v\n", a.name, err)
	return exitError
}

// newFlagSet is a flag set that reports nothing itself: errors come back to run.
func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("palisade", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseArgs parses a command's flags wherever they stand among its arguments (kubectl style:
// "fence node-1 --reason x" as well as "fence --reason x node-1") and returns the arguments;
// everything after "--" is an argument. -h and --help print the command's usage to out.
func (a *app) parseArgs(fs *flag.FlagSet, verb string, args []string) ([]string, error) {
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(a.out, usages[verb], a.name)
			return nil, err
		}
		if err != nil {
			return nil, usagef(verb, "%v", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// nodeArg is the single NODE argument of fence, unfence and explain.
func nodeArg(verb string, args []string) (string, error) {
	switch {
	case len(args) == 0:
		return "", usagef(verb, "%s needs the name of a node", verb)
	case len(args) > 1:
		return "", usagef(verb, "%s takes one node, got %d arguments: %s", verb, len(args), strings.Join(args, " "))
	}
	return args[0], nil
}

// streams are the verbs' input and output.
type streams struct {
	in  io.Reader
	out io.Writer
}

func (a *app) streams() streams { return streams{in: a.in, out: a.out} }
