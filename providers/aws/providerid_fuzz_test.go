package aws_test

import (
	"strings"
	"testing"

	"palisade.dev/palisade/providers/aws"
)

// FuzzParseProviderID: a Node's providerID is outside input. A parse that succeeds names an
// instance ID of EC2's shape and a zone without '/', and writing them back in the canonical
// form parses to the same; the region of any zone is either empty or a prefix of it.
func FuzzParseProviderID(f *testing.F) {
	for _, s := range []string{"aws:///us-east-1a/i-0123456789abcdef0", "aws://us-east-1a/i-01234567", "aws:///us-west-2-lax-1a/i-0fedcba9876543210",
		"aws:////i-01234567", "aws:///a/b/i-01234567", "gce://p/z/vm", "", "aws:///us-east-1a/i-0123456789ABCDEF0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		zone, instance, err := aws.ParseProviderID(id)
		if region := aws.RegionOfZone(zone); region != "" && !strings.HasPrefix(zone, region) {
			t.Fatalf("region %q of zone %q is not its prefix", region, zone)
		}
		if err != nil {
			return
		}
		if zone == "" || strings.Contains(zone, "/") || !strings.HasPrefix(instance, "i-") || len(instance) < 10 || len(instance) > 19 ||
			strings.Trim(instance[2:], "0123456789abcdef") != "" {
			t.Fatalf("ParseProviderID(%q) = %q, %q", id, zone, instance)
		}
		z2, i2, err := aws.ParseProviderID("aws:///" + zone + "/" + instance)
		if err != nil || z2 != zone || i2 != instance {
			t.Fatalf("canonical form of %q parses to %q, %q, %v", id, z2, i2, err)
		}
	})
}
