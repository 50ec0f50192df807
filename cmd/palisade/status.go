package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

const statusUsage = `usage: %[1]s status [-o wide|json|yaml]

Shows the fencing policies (nodes, unhealthy nodes, storm guard, methods), the nodes the
detectors list as unhealthy with their verdict and why, and every NodeFence with its latest
step, newest first.

flags:
  -o, --output FORMAT  wide: more columns (policies: dry run, lease timeout, controller sight;
                       fences: policy, requested by, recovery, reason); json or yaml: the
                       NodeFence list as kubectl get nodefences prints it
  --kubeconfig FILE, --context NAME  as for every command
`

func (a *app) statusCmd(ctx context.Context, kf *kubeFlags, args []string) error {
	var output string
	fs := newFlagSet()
	kf.register(fs)
	fs.StringVar(&output, "o", "", "output format")
	fs.StringVar(&output, "output", "", "output format")
	args, err := a.parseArgs(fs, "status", args)
	if err != nil {
		return err
	}
	if len(args) > 0 {
		return usagef("status", "status takes no arguments, got %s", strings.Join(args, " "))
	}
	switch output {
	case "", "wide", "json", "yaml":
	default:
		return usagef("status", "unknown output format %q: use wide, json or yaml", output)
	}
	c, err := a.connect(*kf)
	if err != nil {
		return err
	}
	return status(ctx, c, a.out, output, a.now())
}

// status prints the policies and fences of the cluster in the format asked: "" (tables),
// "wide", "json" or "yaml" (the NodeFences only).
func status(ctx context.Context, c client.Client, out io.Writer, format string, now time.Time) error {
	var fences v1alpha1.NodeFenceList
	if err := c.List(ctx, &fences); err != nil {
		return apiError(err, "list", nodeFenceResource, "", "")
	}
	switch format {
	case "json", "yaml":
		return printFences(out, &fences, format)
	}
	policies, err := listPolicies(ctx, c)
	if err != nil {
		return err
	}
	return renderTables(out, policies, fences.Items, now, format == "wide")
}

// printFences prints the NodeFence list as kubectl does: every object with its apiVersion and
// kind, without managedFields.
func printFences(out io.Writer, list *v1alpha1.NodeFenceList, format string) error {
	list.APIVersion, list.Kind = v1alpha1.GroupVersion.String(), "NodeFenceList"
	for i := range list.Items {
		list.Items[i].APIVersion, list.Items[i].Kind = v1alpha1.GroupVersion.String(), "NodeFence"
		list.Items[i].ManagedFields = nil
	}
	var b []byte
	var err error
	if format == "json" {
		b, err = json.MarshalIndent(list, "", "    ")
		b = append(b, '\n')
	} else {
		b, err = yaml.Marshal(list)
	}
	if err != nil {
		return fmt.Errorf("printing node fences as %s: %w", format, err)
	}
	_, err = out.Write(b)
	return err
}

// render writes the status tables: policies, the nodes that look unhealthy with the detectors'
// verdict and why, then fences with their latest step.
func render(out io.Writer, policies []v1alpha1.FencingPolicy, fences []v1alpha1.NodeFence, now time.Time) error {
	return renderTables(out, policies, fences, now, false)
}

// renderTables writes the status tables, with more columns when wide.
func renderTables(out io.Writer, policies []v1alpha1.FencingPolicy, fences []v1alpha1.NodeFence, now time.Time, wide bool) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	renderPolicies(w, policies, wide)
	fmt.Fprintln(w, "UNHEALTHY NODE\tPOLICY\tVERDICT\tWHY")
	for _, p := range policies {
		for _, n := range p.Status.Unhealthy {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", n.Node, p.Name, n.Verdict, n.Reason)
		}
	}
	fmt.Fprintln(w)
	sort.Slice(fences, func(i, j int) bool { return fences[i].CreationTimestamp.After(fences[j].CreationTimestamp.Time) })
	header := "NODE\tPHASE\tMETHOD\tTRIGGER\tVERDICT\tTOKEN\tAGE"
	if wide {
		header += "\tPOLICY\tREQUESTED BY\tRECOVERY\tREASON"
	}
	fmt.Fprintln(w, header+"\tLAST STEP")
	for _, nf := range fences {
		token := "-"
		if nf.Status.Token > 0 {
			token = strconv.FormatInt(nf.Status.Token, 10)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s", nf.Spec.NodeName, orDash(string(nf.Status.Phase)), orDash(nf.Status.Method),
			nf.Spec.Trigger, orDash(nf.Spec.Verdict), token, now.Sub(nf.CreationTimestamp.Time).Round(time.Second))
		if wide {
			fmt.Fprintf(w, "\t%s\t%s\t%s\t%s", orDash(nf.Spec.PolicyName), orDash(nf.Spec.RequestedBy), recoveryColumn(nf), orDash(oneLine(nf.Spec.Reason)))
		}
		fmt.Fprintf(w, "\t%s\n", lastStepText(nf))
	}
	return w.Flush()
}

// renderPolicies writes the policy table.
func renderPolicies(w io.Writer, policies []v1alpha1.FencingPolicy, wide bool) {
	header := "POLICY\tNODES\tUNHEALTHY\tSTORM GUARD"
	if wide {
		header += "\tDRY RUN\tLEASE TIMEOUT\tCONTROLLER SIGHT"
	}
	fmt.Fprintln(w, header+"\tMETHODS")
	for _, p := range policies {
		guard := "-"
		if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionStormGuardActive); c != nil {
			guard = map[bool]string{true: "ACTIVE: " + c.Message, false: "ok"}[c.Status == "True"]
		}
		if c := conditionTrue(p.Status.Conditions, v1alpha1.ConditionInvalidSpec); c != nil {
			guard = "INVALID SPEC (" + c.Reason + ", see palisade explain): " + guard
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s", p.Name, p.Status.Nodes, p.Status.UnhealthyNodes, guard)
		if wide {
			sight := "-"
			if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionControllerBlind); c != nil {
				sight = map[bool]string{true: "BLIND: " + c.Reason, false: "ok"}[c.Status == "True"]
			}
			fmt.Fprintf(w, "\t%t\t%s\t%s", p.Spec.DryRun, leaseTimeout(&p), sight)
		}
		fmt.Fprintf(w, "\t%s\n", methodList(p.Spec.Methods))
	}
	fmt.Fprintln(w)
}

// recoveryColumn is how a fence's node was or is to be given back: the recovery's how (and
// who confirmed it clean), or why it is held.
func recoveryColumn(nf v1alpha1.NodeFence) string {
	if r := nf.Status.Recovery; r != nil {
		if r.RequestedBy != "" {
			return string(r.How) + " by " + r.RequestedBy
		}
		return string(r.How)
	}
	if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); c != nil {
		return "held: " + c.Reason
	}
	return "-"
}

// oneLine keeps a table row on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func lastStepText(nf v1alpha1.NodeFence) string {
	if len(nf.Status.Steps) == 0 {
		return "-"
	}
	s := nf.Status.Steps[len(nf.Status.Steps)-1]
	text := fmt.Sprintf("%s %s", s.Name, s.State)
	if s.Reason != "" {
		text += " (" + s.Reason + ")"
	}
	if s.Message != "" {
		text += ": " + s.Message
	}
	return text
}

// methodList is the chain, levels first where they are listed: "a(Executor) + b(IPMI) → c(IPMI)"
// (a level's methods joined by +, levels by →).
func methodList(ms []v1alpha1.Method) string {
	var levels []string
	done := map[int]bool{}
	for i, m := range ms {
		if done[i] {
			continue
		}
		names := []string{m.Name + "(" + string(m.Type) + ")"}
		for j := i + 1; m.Level != "" && j < len(ms); j++ {
			if ms[j].Level == m.Level {
				names, done[j] = append(names, ms[j].Name+"("+string(ms[j].Type)+")"), true
			}
		}
		levels = append(levels, strings.Join(names, " + "))
	}
	return strings.Join(levels, " → ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
