package vsphere_test

import (
	"strings"
	"testing"

	"palisade.dev/palisade/providers/vsphere"
)

// FuzzParseProviderID: a Node's providerID is outside input. A parse that succeeds returns a
// lower-case UUID of 36 characters, hex digits and four dashes, that parses to itself.
func FuzzParseProviderID(f *testing.F) {
	for _, s := range []string{"vsphere://4237d7cd-5a59-f6b6-2c93-1b17b0dbb1e7", "vsphere:///4237D7CD-5A59-F6B6-2C93-1B17B0DBB1E7",
		"vsphere://", "vsphere://------------------------------------", "aws:///z/i-01234567", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		uuid, err := vsphere.ParseProviderID(id)
		if err != nil {
			return
		}
		if len(uuid) != 36 || strings.Count(uuid, "-") != 4 || strings.Trim(uuid, "0123456789abcdef-") != "" || uuid != strings.ToLower(uuid) {
			t.Fatalf("ParseProviderID(%q) = %q", id, uuid)
		}
		if again, err := vsphere.ParseProviderID("vsphere://" + uuid); err != nil || again != uuid {
			t.Fatalf("%q does not parse to itself: %q, %v", uuid, again, err)
		}
	})
}
