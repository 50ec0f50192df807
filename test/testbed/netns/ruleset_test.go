package netns

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRuleset(t *testing.T) {
	const reset = "table inet palisade\ndelete table inet palisade\n"
	for name, tc := range map[string]struct {
		peers []Endpoint
		all   bool
		want  string
	}{
		"nothing cut: the table goes": {want: reset},
		"a port and a whole address, sorted": {
			peers: []Endpoint{{IP: "10.231.0.11"}, {IP: "10.231.0.1", Port: 6443}},
			want: reset + `table inet palisade {
	chain input {
		type filter hook input priority filter; policy accept;
		ip saddr 10.231.0.1 meta l4proto { tcp, udp } th sport 6443 drop
		ip saddr 10.231.0.11 drop
	}
	chain output {
		type filter hook output priority filter; policy accept;
		ip daddr 10.231.0.1 meta l4proto { tcp, udp } th dport 6443 drop
		ip daddr 10.231.0.11 drop
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
		ip saddr 10.231.0.1 meta l4proto { tcp, udp } th sport 6443 drop
		ip daddr 10.231.0.1 meta l4proto { tcp, udp } th dport 6443 drop
		ip saddr 10.231.0.11 drop
		ip daddr 10.231.0.11 drop
	}
}
`,
		},
		"IPv6": {
			peers: []Endpoint{{IP: "fd00::1", Port: 80}},
			want: reset + `table inet palisade {
	chain input {
		type filter hook input priority filter; policy accept;
		ip6 saddr fd00::1 meta l4proto { tcp, udp } th sport 80 drop
	}
	chain output {
		type filter hook output priority filter; policy accept;
		ip6 daddr fd00::1 meta l4proto { tcp, udp } th dport 80 drop
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
		ip6 saddr fd00::1 meta l4proto { tcp, udp } th sport 80 drop
		ip6 daddr fd00::1 meta l4proto { tcp, udp } th dport 80 drop
	}
}
`,
		},
		"everything but loopback": {
			peers: []Endpoint{{IP: "10.231.0.11"}},
			all:   true,
			want: reset + `table inet palisade {
	chain input {
		type filter hook input priority filter; policy accept;
		iif "lo" accept
		drop
	}
	chain output {
		type filter hook output priority filter; policy accept;
		oif "lo" accept
		drop
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
		iifname "eth0" drop
		oifname "eth0" drop
	}
}
`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ruleset(tc.peers, tc.all)); diff != "" {
				t.Errorf("ruleset (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLeftoverName(t *testing.T) {
	for name, want := range map[string]bool{
		"pn1a2b-0-lan": true, "pn1a2b-3-n12": true, "pn1a2b-zz h": false, "pn1a2bh": false,
		"pn1a2b-0h": true, "pnx-0-other": false, "eth0": false, "pn1a2b-0-n": false,
	} {
		if got := leftoverName.MatchString(name); got != want {
			t.Errorf("leftoverName matches %q: %v, want %v", name, got, want)
		}
	}
}
