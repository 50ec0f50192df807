package power

import (
	"encoding/hex"
	"slices"
	"strings"
)

// SameUUID says whether a and b are the same SMBIOS system UUID: equal in any case, inside
// braces and spaces or not, or equal once the first three groups of one are byte-swapped.
// SMBIOS before 2.6 and some BMCs store those three fields little-endian, so one machine may
// read 00112233-4455-6677-8899-aabbccddeeff on one side and 33221100-5544-7766-8899-aabbccddeeff
// on the other. Texts that are not 8-4-4-4-12 hex (or 32 hex digits) are compared as they are,
// ignoring case (the fences compare only verifiable UUIDs, so they never reach that).
func SameUUID(a, b string) bool {
	a, b = BareUUID(a), BareUUID(b)
	x, okA := ParseUUID(a)
	y, okB := ParseUUID(b)
	if !okA || !okB {
		return strings.EqualFold(a, b)
	}
	return x == y || x == SwapUUID(y)
}

// placeholders are system UUIDs that firmware reports when none was set, the same on every
// machine of a kind: they tell no machine from another.
var placeholders = []string{
	"00000000-0000-0000-0000-000000000000",
	"ffffffff-ffff-ffff-ffff-ffffffffffff",
	"03000200-0400-0500-0006-000700080009", // AMI firmware's default
}

// VerifiableUUID says whether s can tell the machine from others: a UUID (8-4-4-4-12 or 32 hex
// digits), not a placeholder (in either byte order). Anything else (empty, a serial number, a
// vendor's own format) is not compared: a BMC and a kubelet may write the same machine's
// identity differently, and a mismatch would refuse every fence of that node.
func VerifiableUUID(s string) bool {
	s = BareUUID(s)
	if _, ok := ParseUUID(s); !ok {
		return false // empty, or not a UUID: nothing to compare it with reliably
	}
	for _, p := range placeholders {
		if SameUUID(s, p) {
			return false
		}
	}
	return true
}

// NodeSMBIOSUUID says whether a node's systemUUID is its machine's SMBIOS UUID, which a BMC can
// be checked against: VerifiableUUID and written 8-4-4-4-12, as Linux writes product_uuid. On a
// machine without SMBIOS tables, the kubelet's cadvisor reports the contents of /etc/machine-id
// instead (32 hex digits, no dashes; this test bed's real machines do): that names an operating
// system's installation, not the machine, and no BMC knows it.
func NodeSMBIOSUUID(systemUUID string) bool {
	s := BareUUID(systemUUID)
	return len(s) == 36 && VerifiableUUID(s)
}

// BareUUID is s without surrounding spaces and braces.
func BareUUID(s string) string {
	return strings.TrimSpace(strings.Trim(strings.TrimSpace(s), "{}"))
}

// ParseUUID reads a UUID in its 8-4-4-4-12 hex form, or as 32 hex digits.
func ParseUUID(s string) ([16]byte, bool) {
	var u [16]byte
	if len(s) == 36 && (s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-') || len(s) != 36 && len(s) != 32 {
		return u, false
	}
	n, err := hex.Decode(u[:], []byte(strings.ReplaceAll(s, "-", "")))
	return u, err == nil && n == len(u)
}

// SwapUUID reverses the bytes of u's first three groups (time_low, time_mid,
// time_hi_and_version).
func SwapUUID(u [16]byte) [16]byte {
	slices.Reverse(u[0:4])
	slices.Reverse(u[4:6])
	slices.Reverse(u[6:8])
	return u
}
