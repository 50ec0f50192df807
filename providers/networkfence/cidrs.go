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

// Widest prefixes a palisade.dev/storage-cidrs annotation may list: a node's addresses on the
// storage network, or at most a small network of its own (csi-addons' own example is a /24).
// A wider one fences whole networks: every machine in it loses its storage.
const (
	widestIPv4 = 24
	widestIPv6 = 64
)

// StorageCIDRs are the CIDRs a storage fence fences for the node: its annotation
// palisade.dev/storage-cidrs, else its InternalIP and ExternalIP addresses as single-address
// prefixes; sorted, without duplicates. A missing node, a node without addresses, a malformed
// annotation and CIDRs that hold another Node's address (spareOthers) are BadTarget errors
// that say what to fix.
func StorageCIDRs(ctx context.Context, reader client.Reader, name string) ([]string, error) {
	node := &corev1.Node{}
	if err := reader.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, badTarget("node %s does not exist: its addresses are unknown", name)
		}
		return nil, apiError("reading node "+name, err)
	}
	cidrs, from, err := nodeCIDRs(node)
	if err != nil {
		return nil, err
	}
	if err := spareOthers(ctx, reader, name, from, cidrs); err != nil {
		return nil, err
	}
	return cidrs, nil
}

// nodeCIDRs are the node's CIDRs, as StorageCIDRs says, and where they come from.
func nodeCIDRs(node *corev1.Node) (cidrs []string, from string, err error) {
	name := node.Name
	if v, ok := node.Annotations[v1alpha1.AnnotationStorageCIDRs]; ok {
		cidrs, err := ParseCIDRs(v)
		if err != nil {
			return nil, "", badTarget("node %s: annotation %s: %v", name, v1alpha1.AnnotationStorageCIDRs, err)
		}
		return cidrs, "its annotation " + v1alpha1.AnnotationStorageCIDRs, nil
	}
	for _, a := range node.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			return nil, "", badTarget("node %s: its %s %q is not an IP address", name, a.Type, a.Address)
		}
		cidrs = append(cidrs, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()).String())
	}
	if len(cidrs) == 0 {
		return nil, "", badTarget("node %s has no InternalIP or ExternalIP address, and no annotation %s", name, v1alpha1.AnnotationStorageCIDRs)
	}
	slices.Sort(cidrs)
	return slices.Compact(cidrs), "its InternalIP and ExternalIP addresses", nil
}

// spareOthers refuses the CIDRs of node name (from: where they come from) when one holds an
// address of another Node of the cluster: an IP address in its status (InternalIP,
// ExternalIP), or a CIDR of its own palisade.dev/storage-cidrs. The storage would refuse that
// node too, a healthy one, until the fence is lifted. Every Node counts, one being deleted
// too: its machine may still run.
func spareOthers(ctx context.Context, reader client.Reader, name, from string, cidrs []string) error {
	nodes := &corev1.NodeList{}
	if err := reader.List(ctx, nodes); err != nil {
		return apiError("listing the nodes, to make sure the storage fence of node "+name+" spares them", err)
	}
	ours := make([]netip.Prefix, len(cidrs))
	for i, c := range cidrs {
		ours[i] = netip.MustParsePrefix(c) // canonical: ParseCIDRs's or an address's
	}
	// what says which of other's addresses c takes in: "holds 10.0.0.7, the InternalIP of node n2".
	refuse := func(c netip.Prefix, what, other string) error {
		return badTarget("node %s: %s (from %s) %s: a storage fence of it would cut node %s off its storage too. "+
			"List in node %s's annotation %s only its own addresses on the storage network (such as 10.20.0.5/32, fd00:20::5/128)",
			name, c, from, what, other, name, v1alpha1.AnnotationStorageCIDRs)
	}
	for i := range nodes.Items {
		other := &nodes.Items[i]
		if other.Name == name {
			continue
		}
		for _, a := range other.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil {
				continue // not an address: nothing of it can be fenced
			}
			for _, c := range ours {
				if c.Contains(ip.Unmap()) {
					return refuse(c, fmt.Sprintf("holds %s, the %s of node %s", ip.Unmap(), a.Type, other.Name), other.Name)
				}
			}
		}
		theirs, unread := readCIDRs(other.Annotations[v1alpha1.AnnotationStorageCIDRs])
		for _, t := range theirs {
			for _, c := range ours {
				if c.Overlaps(t) {
					return refuse(c, fmt.Sprintf("overlaps %s, which node %s lists as its own in %s", t, other.Name, v1alpha1.AnnotationStorageCIDRs), other.Name)
				}
			}
		}
		// An entry of another node's list that is no address at all may name any of them: a
		// fence of more than one address might take that node's in.
		for _, c := range ours {
			if len(unread) > 0 && c.Bits() < c.Addr().BitLen() {
				return badTarget("node %s: %s (from %s) may cover the storage addresses of node %s, whose annotation %s holds %q, which names none of its addresses (not an address, or a CIDR wider than a /24 or a /64). "+
					"Fix that annotation (such as 10.20.0.6/32). List in node %s's annotation %s only its own addresses, one by one (such as 10.20.0.5/32), to fence it meanwhile",
					name, c, from, other.Name, v1alpha1.AnnotationStorageCIDRs, unread[0], name, v1alpha1.AnnotationStorageCIDRs)
			}
		}
	}
	return nil
}

// readCIDRs reads another node's palisade.dev/storage-cidrs as far as it can, to spare what it
// names even when it is malformed (that node's own fence refuses it; this one must not cut the
// node off meanwhile): each entry a CIDR, its host bits cleared, or a bare address as its own
// /32 or /128; unread are the entries that are neither, and CIDRs wider than ParseCIDRs takes.
func readCIDRs(v string) (cidrs []netip.Prefix, unread []string) {
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if pfx, err := netip.ParsePrefix(f); err == nil {
			a, bits := pfx.Addr(), pfx.Bits()
			if a.Is4In6() {
				a, bits = a.Unmap(), max(bits-96, 0)
			}
			if pfx = netip.PrefixFrom(a, bits).Masked(); notTooWide(pfx) != nil {
				// 10.0.0.5/0 is no node's network: a typo, which would otherwise refuse every
				// other node's storage fence; it names no address this can spare.
				unread = append(unread, f)
				continue
			}
			cidrs = append(cidrs, pfx)
			continue
		}
		if ip, err := netip.ParseAddr(f); err == nil {
			cidrs = append(cidrs, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		unread = append(unread, f)
	}
	return cidrs, unread
}

// ParseCIDRs parses the comma-separated CIDRs of a palisade.dev/storage-cidrs annotation: each
// a network address with its prefix length ("10.20.0.5/32", "10.20.0.0/24", "fd00::5/128"),
// none with host bits set after the prefix, none wider than a /24 (IPv4) or a /64 (IPv6), none
// an IPv4 network written as IPv6. It returns them canonical, sorted, without duplicates.
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
		if err := notTooWide(pfx); err != nil {
			return nil, err
		}
		out = append(out, pfx.String())
	}
	if len(out) == 0 {
		return nil, errors.New("lists no CIDR")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// notTooWide refuses a prefix wider than a /24 (IPv4) or a /64 (IPv6), and an IPv4 network
// written as IPv6 (::ffff:10.20.0.0/120), which a storage may not read as the IPv4 network.
func notTooWide(pfx netip.Prefix) error {
	if pfx.Addr().Is4In6() {
		return fmt.Errorf("%q is an IPv4 network written as IPv6: write it as IPv4 (such as 10.20.0.5/32)", pfx)
	}
	widest := widestIPv6
	if pfx.Addr().Is4() {
		widest = widestIPv4
	}
	if pfx.Bits() < widest {
		return fmt.Errorf("%q is wider than a /%d: a storage fence of it would cut every machine in it off its storage. "+
			"List the node's own addresses on the storage network (such as 10.20.0.5/32, fd00:20::5/128), or a network of its own no wider than /%d (IPv4) or /%d (IPv6)",
			pfx, widest, widestIPv4, widestIPv6)
	}
	return nil
}
