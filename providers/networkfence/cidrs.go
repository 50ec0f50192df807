package networkfence

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// StorageCIDRs are the CIDRs a storage fence fences for the node: its annotation
// palisade.dev/storage-cidrs, else its InternalIP and ExternalIP addresses as single-address
// prefixes; sorted, without duplicates. A missing node, a node without addresses and a
// malformed annotation are BadTarget errors that say what to fix.
func StorageCIDRs(ctx context.Context, reader client.Reader, name string) ([]string, error) {
	node := &corev1.Node{}
	if err := reader.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, badTarget("node %s does not exist: its addresses are unknown", name)
		}
		return nil, apiError("reading node "+name, err)
	}
	if v, ok := node.Annotations[v1alpha1.AnnotationStorageCIDRs]; ok {
		cidrs, err := ParseCIDRs(v)
		if err != nil {
			return nil, badTarget("node %s: annotation %s: %v", name, v1alpha1.AnnotationStorageCIDRs, err)
		}
		return cidrs, nil
	}
	var cidrs []string
	for _, a := range node.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			return nil, badTarget("node %s: its %s %q is not an IP address", name, a.Type, a.Address)
		}
		cidrs = append(cidrs, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()).String())
	}
	if len(cidrs) == 0 {
		return nil, badTarget("node %s has no InternalIP or ExternalIP address, and no annotation %s", name, v1alpha1.AnnotationStorageCIDRs)
	}
	slices.Sort(cidrs)
	return slices.Compact(cidrs), nil
}

// ParseCIDRs parses the comma-separated CIDRs of a palisade.dev/storage-cidrs annotation: each
// a network address with its prefix length ("10.20.0.5/32", "10.20.0.0/24", "fd00::5/128"),
// none with host bits set after the prefix. It returns them canonical, sorted, without
// duplicates.
func ParseCIDRs(v string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		pfx, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR (want e.g. 10.20.0.5/32)", f)
		}
		if pfx.Masked() != pfx {
			return nil, fmt.Errorf("%q has bits set after its prefix: did you mean %s, or %s/%d?", f, pfx.Masked(), pfx.Addr(), pfx.Addr().BitLen())
		}
		out = append(out, pfx.String())
	}
	if len(out) == 0 {
		return nil, errors.New("lists no CIDR")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
