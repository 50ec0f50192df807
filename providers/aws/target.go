package aws

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
)

// Secret keys of the method's credentials.
const (
	KeyAccessKeyID     = "accessKeyID"
	KeySecretAccessKey = "secretAccessKey"
	KeySessionToken    = "sessionToken"
)

var (
	instanceIDPattern = regexp.MustCompile(`^i-[0-9a-f]{8,17}$`)
	// regionOfZone is a zone's region: us-east-1a → us-east-1, us-west-2-lax-1a → us-west-2,
	// us-gov-west-1a → us-gov-west-1, cn-north-1a → cn-north-1.
	regionOfZone = regexp.MustCompile(`^([a-z]{2}(?:-gov|-iso[a-z]*)?-[a-z]+-[0-9]+)`)
)

// Target is the instance behind one node, with the credentials to reach it. The credentials
// must never be logged or written to an event or a status.
type Target struct {
	Node       string
	InstanceID string
	Region     string
	// Endpoint is a custom EC2 endpoint URL, "" for the region's.
	Endpoint string
	// Credentials is nil for the SDK's default chain.
	Credentials awssdk.CredentialsProvider
	// secretKey is redacted from error texts.
	secretKey string
}

// String never prints the credentials.
func (t Target) String() string { return fmt.Sprintf("%s (%s in %s)", t.Node, t.InstanceID, t.Region) }

// ParseProviderID splits "aws:///<zone>/<instance-id>" (also "aws://<zone>/<instance-id>", as
// older clusters wrote it) into zone and instance ID.
func ParseProviderID(id string) (zone, instance string, err error) {
	rest, ok := strings.CutPrefix(id, "aws://")
	if !ok {
		return "", "", fmt.Errorf("providerID %q is not an AWS one (aws:///<zone>/<instance-id>)", id)
	}
	parts := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	if len(parts) != 2 || parts[0] == "" || !instanceIDPattern.MatchString(parts[1]) {
		return "", "", fmt.Errorf("malformed AWS providerID %q: want aws:///<zone>/<instance-id>", id)
	}
	return parts[0], parts[1], nil
}

// RegionOfZone is the region of an availability zone or local zone, "" when it is not one.
func RegionOfZone(zone string) string {
	m := regionOfZone.FindStringSubmatch(zone)
	if m == nil {
		return ""
	}
	return m[1]
}

// Target resolves the machine behind the fenced node (the power.Switch's): the instance of the
// Node's providerID, with the method's credentials. A Node deleted after its fence (node
// deletion lets it go once the fence holds; the volumes are detached after that) is resolved
// from the instance the fence recorded before its off command (targetOfRecord).
func (p *Provider) Target(ctx context.Context, req providers.Request) (Target, error) {
	m := req.Method
	if p.Reader == nil {
		return Target{}, power.BadTarget("the aws provider has no API reader to find the instance of node %s", req.Node())
	}
	var t Target
	node := &corev1.Node{}
	switch err := p.Reader.Get(ctx, client.ObjectKey{Name: req.Node()}, node); {
	case apierrors.IsNotFound(err):
		if t, err = targetOfRecord(req); err != nil {
			return Target{}, err
		}
	case err != nil:
		return Target{}, providers.NewError(providers.ReasonAPIError, fmt.Errorf("reading node %s: %w", req.Node(), err))
	default:
		zone, instance, err := ParseProviderID(node.Spec.ProviderID)
		if err != nil {
			return Target{}, power.BadTarget("node %s: %v", req.Node(), err)
		}
		t = Target{Node: req.Node(), InstanceID: instance, Region: RegionOfZone(zone)}
		if m.AWS != nil && m.AWS.Region != "" {
			t.Region = m.AWS.Region
		}
		if t.Region == "" {
			return Target{}, power.BadTarget("node %s: no region: its providerID's zone %q names none; set the method's aws.region", req.Node(), zone)
		}
	}
	if m.AWS != nil {
		t.Endpoint = m.AWS.Endpoint
		if ref := m.AWS.CredentialsSecretRef; ref != nil {
			s, err := power.Secret(ctx, p.Reader, *ref, "the AWS credentials")
			if err != nil {
				return Target{}, err
			}
			ak, sk := string(s.Data[KeyAccessKeyID]), string(s.Data[KeySecretAccessKey])
			if ak == "" || sk == "" {
				return Target{}, power.BadTarget("Secret %s/%s needs the keys %s and %s", ref.Namespace, ref.Name, KeyAccessKeyID, KeySecretAccessKey)
			}
			t.Credentials = credentials.NewStaticCredentialsProvider(ak, sk, string(s.Data[KeySessionToken]))
			t.secretKey = sk
		}
	}
	return t, nil
}

// recordedTarget reads back a Target's String: node, instance and region.
var recordedTarget = regexp.MustCompile(`^(.+) \((i-[0-9a-f]{8,17}) in ([a-z0-9-]+)\)$`)

// targetOfRecord is the instance this fence recorded for the method (providers.Request.FencedTarget,
// a Target's String), for a Node that is gone: the machine the fence stopped, and the only one
// it may act on. Without a record there is no instance to act on: BadTarget, not retried.
func targetOfRecord(req providers.Request) (Target, error) {
	const byHand = "If the node's instance may still run, stop it and force-detach its volumes by hand (aws ec2 stop-instances --force, aws ec2 detach-volume --force); then delete this NodeFence."
	named := req.FencedTarget()
	if named == "" {
		return Target{}, providers.WithHint(power.BadTarget("node %s is gone, and this fence recorded no instance for method %s: there is nothing to act on", req.Node(), req.Method.Name), byHand)
	}
	m := recordedTarget.FindStringSubmatch(named)
	if m == nil || m[1] != req.Node() {
		return Target{}, providers.WithHint(power.BadTarget("node %s is gone, and this fence's record of its instance, %q, names none of it", req.Node(), named), byHand)
	}
	return Target{Node: m[1], InstanceID: m[2], Region: m[3]}, nil
}
