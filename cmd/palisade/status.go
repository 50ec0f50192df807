package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// status prints the policies and fences of the cluster in the current kubeconfig context.
func status(ctx context.Context, out io.Writer) error {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("connecting to the API server: %w", err)
	}
	var policies v1alpha1.FencingPolicyList
	if err := c.List(ctx, &policies); err != nil {
		return fmt.Errorf("listing fencing policies: %w", err)
	}
	var fences v1alpha1.NodeFenceList
	if err := c.List(ctx, &fences); err != nil {
		return fmt.Errorf("listing node fences: %w", err)
	}
	return render(out, policies.Items, fences.Items, time.Now())
}

// render writes the status tables: policies, the nodes that look unhealthy with the detectors'
// verdict and why, then fences with their latest step.
func render(out io.Writer, policies []v1alpha1.FencingPolicy, fences []v1alpha1.NodeFence, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POLICY\tNODES\tUNHEALTHY\tSTORM GUARD\tMETHODS")
	for _, p := range policies {
		guard := "-"
		if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionStormGuardActive); c != nil {
			guard = map[bool]string{true: "ACTIVE: " + c.Message, false: "ok"}[c.Status == "True"]
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\n", p.Name, p.Status.Nodes, p.Status.UnhealthyNodes, guard, methodList(p.Spec.Methods))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "UNHEALTHY NODE\tPOLICY\tVERDICT\tWHY")
	for _, p := range policies {
		for _, n := range p.Status.Unhealthy {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", n.Node, p.Name, n.Verdict, n.Reason)
		}
	}
	fmt.Fprintln(w)
	sort.Slice(fences, func(i, j int) bool { return fences[i].CreationTimestamp.After(fences[j].CreationTimestamp.Time) })
	fmt.Fprintln(w, "NODE\tPHASE\tMETHOD\tTRIGGER\tVERDICT\tTOKEN\tAGE\tLAST STEP")
	for _, nf := range fences {
		token := "-"
		if nf.Status.Token > 0 {
			token = strconv.FormatInt(nf.Status.Token, 10)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", nf.Spec.NodeName, orDash(string(nf.Status.Phase)), orDash(nf.Status.Method),
			nf.Spec.Trigger, orDash(nf.Spec.Verdict), token, now.Sub(nf.CreationTimestamp.Time).Round(time.Second), lastStepText(nf))
	}
	return w.Flush()
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
