package power

import "testing"

func TestSameUUID(t *testing.T) {
	const u = "00112233-4455-6677-8899-aabbccddeeff"
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{u, u, true},
		{u, "00112233-4455-6677-8899-AABBCCDDEEFF", true},
		{u, " {00112233-4455-6677-8899-aabbccddeeff}\n", true},
		{u, "33221100-5544-7766-8899-aabbccddeeff", true},
		{"33221100-5544-7766-8899-aabbccddeeff", u, true},
		{u, "00112233-4455-6677-8899-aabbccddeef0", false},
		{u, "33221100-5544-7766-9988-aabbccddeeff", false}, // the fourth group is never swapped
		{u, "33221100-4455-6677-8899-aabbccddeeff", false}, // one group swapped is another UUID
		{u, "00112233445566778899AABBCCDDEEFF", true},
		{u, "0011223344556677-8899aabbccddeeff", false},
		{"not-a-uuid", "NOT-A-UUID", true},
		{"not-a-uuid", u, false},
		{"0011223x-4455-6677-8899-aabbccddeeff", "0011223x-4455-6677-8899-aabbccddeeff", true},
	} {
		if got := SameUUID(tc.a, tc.b); got != tc.want {
			t.Errorf("SameUUID(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// A node's systemUUID is compared only when it is an SMBIOS UUID, not the machine-id cadvisor
// reports on machines without SMBIOS tables.
func TestNodeSMBIOSUUID(t *testing.T) {
	for s, want := range map[string]bool{
		"00112233-4455-6677-8899-aabbccddeeff":    true,
		" {00112233-4455-6677-8899-AABBCCDDEEFF}": true,
		"3d1219c7c4c5404aaa1f6d2a48adfda4":        false, // /etc/machine-id
		"00000000-0000-0000-0000-000000000000":    false,
		"":                                        false,
		"simnode-1":                               false,
	} {
		if got := NodeSMBIOSUUID(s); got != want {
			t.Errorf("NodeSMBIOSUUID(%q) = %v, want %v", s, got, want)
		}
	}
}

// Placeholders that firmware reports on every machine of a kind tell none apart: no check.
func TestVerifiableUUID(t *testing.T) {
	for s, want := range map[string]bool{
		"00112233-4455-6677-8899-aabbccddeeff":   true,
		"":                                       false,
		" {} ":                                   false,
		"00000000-0000-0000-0000-000000000000":   false,
		"FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF":   false,
		"03000200-0400-0500-0006-000700080009":   false,
		"00020003-0004-0005-0006-000700080009":   false, // the AMI default, byte-swapped
		"00112233445566778899AABBCCDDEEFF":       true,
		"{00112233-4455-6677-8899-aabbccddeeff}": true,
		"VMware-42 1a 2b 3c":                     false, // not a UUID: not compared
		"SN-4F7K2L9":                             false,
		"00112233-4455-6677-8899-aabbccddeefg":   false,
	} {
		if got := VerifiableUUID(s); got != want {
			t.Errorf("VerifiableUUID(%q) = %v, want %v", s, got, want)
		}
	}
}
