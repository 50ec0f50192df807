package gateway

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"
)

// TestRulesetBothFamilies: a node with IPv4 and IPv6 addresses gets a reject rule for each
// family, marked with its token, and nft accepts the script (checked, not applied: nft -c).
func TestRulesetBothFamilies(t *testing.T) {
	g := &Gateway{cfg: Config{Table: DefaultTable}, nodes: map[string]entry{
		"n1": {Token: 7, Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1"), netip.MustParseAddr("10.0.0.2")}},
		"n2": {Token: 3}, // unfenced: no rule
	}}
	script := g.ruleset()
	for _, want := range []string{
		`ip saddr { 10.0.0.1, 10.0.0.2 } reject comment "palisade fence node=n1 token=7"`,
		`ip6 saddr { fd00::1 } reject comment "palisade fence node=n1 token=7"`,
	} {
		if !strings.Contains(script, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, script)
		}
	}
	if strings.Contains(script, "node=n2") {
		t.Errorf("ruleset has a rule for unfenced n2:\n%s", script)
	}
	cmd := exec.Command("nft", "-c", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("nft -c refuses the ruleset: %v: %s\n%s", err, out, script)
	}
}
