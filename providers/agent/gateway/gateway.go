// Package gateway is the storage gateway's side of a storage fence: the node agent, run on a
// storage host (an NFS or iSCSI server), keeps an nftables table that rejects every packet from
// the addresses of the nodes it fences, so that a fenced node cannot reach its volumes whatever
// it still runs. Every fence and unfence carries a fencing token; the gateway keeps the highest
// one per node on disk and refuses an older one, so a late or replayed command changes nothing.
// The fences are on disk too, and put back when the gateway starts (a rebooted storage host
// forgets its ruleset).
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"palisade.dev/palisade/providers/agent/pki"
)

// StateFile is the file, in the gateway's state directory, that holds its fences and tokens.
const StateFile = "gateway-fences.json"

// DefaultTable is the nftables table (family inet) the gateway owns.
const DefaultTable = "palisade_gateway"

// Config configures a Gateway.
type Config struct {
	// NFT is the command that runs nft, with any prefix (["ip", "netns", "exec", "g", "nft"] in
	// tests); default ["nft"].
	NFT []string
	// Table is the table the gateway owns; default DefaultTable.
	Table string
	// StateDir holds StateFile; it must outlive the gateway (a hostPath).
	StateDir string
}

// entry is one node's record.
type entry struct {
	// Token is the highest fencing token taken for the node.
	Token int64 `json:"token"`
	// Addrs are the fenced addresses; none once unfenced.
	Addrs []netip.Addr `json:"addrs,omitempty"`
}

// Gateway fences nodes off a storage host.
type Gateway struct {
	cfg   Config
	mu    sync.Mutex
	nodes map[string]entry
}

// StaleTokenError is a command refused because the gateway took a higher token for its node.
type StaleTokenError struct {
	Node           string
	Token, Highest int64
	Command        string
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("refused: %s of node %s carries fencing token %d, older than token %d this gateway already took for it; a late or replayed command is never carried out",
		e.Command, e.Node, e.Token, e.Highest)
}

// New loads the gateway's fences from its state directory and puts them in place.
func New(ctx context.Context, cfg Config) (*Gateway, error) {
	if len(cfg.NFT) == 0 {
		cfg.NFT = []string{"nft"}
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if cfg.StateDir == "" {
		return nil, errors.New("the storage gateway needs a state directory: its fences and tokens must outlive it")
	}
	g := &Gateway{cfg: cfg, nodes: map[string]entry{}}
	raw, err := os.ReadFile(g.path())
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("reading the gateway's fences: %w", err)
	default:
		if err := json.Unmarshal(raw, &g.nodes); err != nil {
			return nil, fmt.Errorf("the gateway's fences in %s are unreadable (%v): fix the file or remove it, which forgets every fence and token", g.path(), err)
		}
	}
	if err := g.apply(ctx); err != nil {
		return nil, fmt.Errorf("putting the gateway's fences back in place: %w", err)
	}
	return g, nil
}

func (g *Gateway) path() string { return filepath.Join(g.cfg.StateDir, StateFile) }

// Fence rejects every packet from addrs as node's, under token. It records the fence on disk,
// then replaces the table in one nft transaction.
func (g *Gateway) Fence(ctx context.Context, node string, token int64, addrs []netip.Addr) error {
	if len(addrs) == 0 {
		return fmt.Errorf("fence of node %s: no address to fence", node)
	}
	return g.change(ctx, "fence", node, token, addrs)
}

// Unfence lifts node's fence, under a token newer than the fence's.
func (g *Gateway) Unfence(ctx context.Context, node string, token int64) error {
	return g.change(ctx, "unfence", node, token, nil)
}

func (g *Gateway) change(ctx context.Context, what, node string, token int64, addrs []netip.Addr) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.nodes[node]
	if token < old.Token {
		return &StaleTokenError{Node: node, Token: token, Highest: old.Token, Command: what}
	}
	addrs = slices.Clone(addrs)
	slices.SortFunc(addrs, netip.Addr.Compare)
	g.nodes[node] = entry{Token: token, Addrs: slices.Compact(addrs)}
	if err := g.save(); err != nil {
		g.nodes[node] = old
		return fmt.Errorf("%s of node %s: recording it: %w", what, node, err)
	}
	if err := g.apply(ctx); err != nil {
		return fmt.Errorf("%s of node %s: %w", what, node, err)
	}
	return nil
}

func (g *Gateway) save() error {
	raw, err := json.MarshalIndent(g.nodes, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(g.cfg.StateDir, 0o700); err != nil {
		return err
	}
	return pki.WriteFileAtomic(g.path(), raw)
}

// comment marks a node's rule; Check finds it by this.
func comment(node string, token int64) string {
	return fmt.Sprintf("palisade fence node=%s token=%d", node, token)
}

// ruleset replaces the table with one reject rule per fenced node and address family.
func (g *Gateway) ruleset() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s\ndelete table inet %s\ntable inet %s {\n", g.cfg.Table, g.cfg.Table, g.cfg.Table)
	// Before the host's own filters: a fenced node is rejected whatever they accept.
	b.WriteString("\tchain input {\n\t\ttype filter hook input priority filter - 10; policy accept;\n")
	names := make([]string, 0, len(g.nodes))
	for n := range g.nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		e := g.nodes[n]
		for _, fam := range []struct {
			name string
			is   func(netip.Addr) bool
		}{{"ip", netip.Addr.Is4}, {"ip6", netip.Addr.Is6}} {
			var set []string
			for _, a := range e.Addrs {
				if fam.is(a) {
					set = append(set, a.String())
				}
			}
			if len(set) > 0 {
				fmt.Fprintf(&b, "\t\t%s saddr { %s } reject comment %q\n", fam.name, strings.Join(set, ", "), comment(n, e.Token))
			}
		}
	}
	b.WriteString("\t}\n}\n")
	return b.String()
}

func (g *Gateway) apply(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, g.cfg.NFT[0], append(slices.Clone(g.cfg.NFT[1:]), "-f", "-")...)
	cmd.Stdin = strings.NewReader(g.ruleset())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// Status is what the ruleset, read back, shows of a node's fence.
type Status struct {
	// Token is the highest token taken for the node.
	Token int64
	// Fenced: a rule of the node's, for its token, rejects every address it was fenced for.
	Fenced bool
	// Rejected are the addresses the node's rules reject, as read back.
	Rejected []netip.Addr
}

// Check reads the table back from nftables (not from the gateway's own record) and says
// whether node's fence is in place.
func (g *Gateway) Check(ctx context.Context, node string) (Status, error) {
	g.mu.Lock()
	e := g.nodes[node]
	g.mu.Unlock()
	cmd := exec.CommandContext(ctx, g.cfg.NFT[0], append(slices.Clone(g.cfg.NFT[1:]), "-j", "list", "table", "inet", g.cfg.Table)...)
	out, err := cmd.Output()
	if err != nil {
		return Status{Token: e.Token}, fmt.Errorf("reading the gateway's table back: %w", err)
	}
	rejected, err := rejectedBy(out, comment(node, e.Token))
	if err != nil {
		return Status{Token: e.Token}, err
	}
	st := Status{Token: e.Token, Rejected: rejected}
	st.Fenced = len(e.Addrs) > 0
	for _, a := range e.Addrs {
		st.Fenced = st.Fenced && slices.Contains(rejected, a)
	}
	return st, nil
}

// listing is the part of `nft -j list table` Check reads.
type listing struct {
	Nftables []struct {
		Rule *struct {
			Chain   string            `json:"chain"`
			Comment string            `json:"comment"`
			Expr    []json.RawMessage `json:"expr"`
		} `json:"rule"`
	} `json:"nftables"`
}

// rejectedBy is the source addresses the input rules commented mark reject.
func rejectedBy(raw []byte, mark string) ([]netip.Addr, error) {
	var l listing
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, fmt.Errorf("reading the gateway's table back: %w", err)
	}
	var out []netip.Addr
	for _, item := range l.Nftables {
		r := item.Rule
		if r == nil || r.Chain != "input" || r.Comment != mark {
			continue
		}
		var addrs []netip.Addr
		rejects := false
		for _, x := range r.Expr {
			var e struct {
				Match *struct {
					Left struct {
						Payload struct{ Field string } `json:"payload"`
					} `json:"left"`
					Right json.RawMessage `json:"right"`
				} `json:"match"`
			}
			if err := json.Unmarshal(x, &e); err != nil {
				return nil, fmt.Errorf("reading the gateway's table back: %w", err)
			}
			if _, ok := objectKeys(x)["reject"]; ok {
				rejects = true
			}
			if e.Match != nil && e.Match.Left.Payload.Field == "saddr" {
				addrs = append(addrs, addresses(e.Match.Right)...)
			}
		}
		if rejects {
			out = append(out, addrs...)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

func objectKeys(raw json.RawMessage) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	return m
}

// addresses reads a match's right side: one address, or {"set": [addresses]}.
func addresses(raw json.RawMessage) []netip.Addr {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if a, err := netip.ParseAddr(one); err == nil {
			return []netip.Addr{a}
		}
		return nil
	}
	var set struct {
		Set []json.RawMessage `json:"set"`
	}
	if json.Unmarshal(raw, &set) != nil {
		return nil
	}
	var out []netip.Addr
	for _, s := range set.Set {
		out = append(out, addresses(s)...)
	}
	return out
}

// Token is the highest token the gateway took for node.
func (g *Gateway) Token(node string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.nodes[node].Token
}
