package redfish

import (
	"encoding/hex"
	"slices"
	"strings"
)

// sameUUID says whether a and b are the same SMBIOS system UUID: equal in any case, inside
// braces and spaces or not, or equal once the first three groups of one are byte-swapped.
// SMBIOS before 2.6 and some BMCs store those three fields little-endian, so one machine may
// read 00112233-4455-6677-8899-aabbccddeeff on one side and 33221100-5544-7766-8899-aabbccddeeff
// on the other. Texts that are not 8-4-4-4-12 hex (or 32 hex digits) are compared as they are,
// ignoring case (the fence compares only verifiable UUIDs, so it never reaches that).
func sameUUID(a, b string) bool {
	a, b = bareUUID(a), bareUUID(b)
	x, okA := uuidBytes(a)
	y, okB := uuidBytes(b)
	if !okA || !okB {
		return strings.EqualFold(a, b)
	}
	return x == y || x == swapUUID(y)
}

// placeholders are system UUIDs that firmware reports when none was set, the same on every
// machine of a kind: they tell no machine from another.
var placeholders = []string{
	"00000000-0000-0000-0000-000000000000",
	"ffffffff-ffff-ffff-ffff-ffffffffffff",
	"03000200-0400-0500-0006-000700080009", // AMI firmware's default
}

// verifiable says whether s can tell the machine from others: a UUID (8-4-4-4-12 or 32 hex
// digits), not a placeholder (in either byte order). Anything else (empty, a serial number, a
// vendor's own format) is not compared: a BMC and a kubelet may write the same machine's
// identity differently, and a mismatch would refuse every fence of that node.
func verifiable(s string) bool {
	s = bareUUID(s)
	if _, ok := uuidBytes(s); !ok {
		return false // empty, or not a UUID: nothing to compare it with reliably
	}
	for _, p := range placeholders {
		if sameUUID(s, p) {
			return false
		}
	}
	return true
}

// bareUUID is s without surrounding spaces and braces.
func bareUUID(s string) string {
	return strings.TrimSpace(strings.Trim(strings.TrimSpace(s), "{}"))
}

// uuidBytes reads a UUID in its 8-4-4-4-12 hex form, or as 32 hex digits.
func uuidBytes(s string) ([16]byte, bool) {
	var u [16]byte
	if len(s) == 36 && (s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-') || len(s) != 36 && len(s) != 32 {
		return u, false
	}
	n, err := hex.Decode(u[:], []byte(strings.ReplaceAll(s, "-", "")))
	return u, err == nil && n == len(u)
}

// swapUUID reverses the bytes of u's first three groups (time_low, time_mid,
// time_hi_and_version).
func swapUUID(u [16]byte) [16]byte {
	slices.Reverse(u[0:4])
	slices.Reverse(u[4:6])
	slices.Reverse(u[6:8])
	return u
}
