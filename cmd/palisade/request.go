package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// requestText checks the text of a request as the controller will (v1alpha1.RequestText).
// subject names the text ("--reason"), what says what it must say.
func requestText(text, subject, what string) (string, error) {
	return v1alpha1.RequestText(text, subject, what)
}

// errNotConfirmed is the answer to a question not answered yes.
var errNotConfirmed = errors.New("not confirmed")

// confirm asks question on out and reads the answer from in: yes only for "y" or "yes". An
// interrupt (ctx's end) while it waits is an error.
func confirm(ctx context.Context, s streams, question string) error {
	fmt.Fprintf(s.out, "%s [y/N] ", question)
	type answer struct {
		line string
		err  error
	}
	answers := make(chan answer, 1)
	go func() {
		line, err := bufio.NewReader(s.in).ReadString('\n')
		answers <- answer{line, err}
	}()
	var a answer
	select {
	case <-ctx.Done():
		fmt.Fprintln(s.out)
		return fmt.Errorf("interrupted: %w", ctx.Err())
	case a = <-answers:
	}
	if a.err != nil && !errors.Is(a.err, io.EOF) {
		return fmt.Errorf("reading the answer: %w", a.err)
	}
	switch strings.ToLower(strings.TrimSpace(a.line)) {
	case "y", "yes":
		return nil
	}
	if a.line == "" {
		fmt.Fprintln(s.out) // no answer (end of input): end the prompt's line
	}
	return errNotConfirmed
}

// annotate sets one annotation of node with a merge patch, which the cluster's admission
// policies see like kubectl annotate's. A refusal by admission is a deniedError.
func annotate(ctx context.Context, c client.Client, node, key, value, what string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		return fmt.Errorf("building the patch: %w", err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	err = c.Patch(ctx, n, client.RawPatch(types.MergePatchType, patch))
	switch {
	case err == nil:
		return nil
	case (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && admissionDenial(err):
		return &deniedError{what: what, msg: statusMessage(err)}
	}
	return apiError(err, "patch", nodesResource, "", node)
}

// getNode reads node; a node that does not exist is an error saying so.
func getNode(ctx context.Context, c client.Client, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	err := c.Get(ctx, client.ObjectKey{Name: name}, node)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("node %s does not exist (kubectl get nodes lists the nodes)", name)
	case err != nil:
		return nil, apiError(err, "get", nodesResource, "", name)
	}
	return node, nil
}

// getNodeFence reads the NodeFence of node, nil when it has none.
func getNodeFence(ctx context.Context, c client.Client, node string) (*v1alpha1.NodeFence, error) {
	nf := &v1alpha1.NodeFence{}
	err := c.Get(ctx, client.ObjectKey{Name: node}, nf)
	switch {
	case apierrors.IsNotFound(err) && !isNoKind(err):
		return nil, nil
	case err != nil:
		return nil, apiError(err, "get", nodeFenceResource, "", node)
	}
	return nf, nil
}

// isNoKind says whether a NotFound error means the resource itself is unknown (no CRD) rather
// than the object.
func isNoKind(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d == nil || d.Name == ""
}

// listPolicies lists the FencingPolicies.
func listPolicies(ctx context.Context, c client.Client) ([]v1alpha1.FencingPolicy, error) {
	var list v1alpha1.FencingPolicyList
	if err := c.List(ctx, &list); err != nil {
		return nil, apiError(err, "list", policiesResource, "", "")
	}
	return list.Items, nil
}
