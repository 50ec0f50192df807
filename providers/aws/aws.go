package aws

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
)

const (
	// ProviderName is the provider's name in metrics and records.
	ProviderName = "aws"
	// DefaultTimeout bounds one call, the SDK's retries included.
	DefaultTimeout = 15 * time.Second
)

// hints tell an operator what to look at for each kind of failure.
var hints = map[providers.Reason]string{
	providers.ReasonCloudAuthFailed:  "AWS refused the credentials or the permission: the controller's role (or the keys in the method's Secret) needs ec2:StopInstances and ec2:DescribeInstances on the node's instance (and ec2:DescribeVolumes and ec2:DetachVolume with forceDetachVolumes); then delete this NodeFence to try again.",
	providers.ReasonCloudUnreachable: "The EC2 API did not answer in time: check the controller's network path to it (or the method's aws.endpoint).",
	providers.ReasonCloudRefused:     "EC2 answered with an error: see the message, and the instance in the EC2 console.",
	providers.ReasonBadTarget:        "Fix the node's providerID (aws:///<zone>/<instance-id>) or the method's aws settings named above, then delete this NodeFence to try again.",
}

var (
	_ providers.Fencer         = (*Provider)(nil)
	_ providers.VolumeReleaser = (*Provider)(nil)
)

// detachRecheck is how often ReleaseVolumes is asked again while volumes detach.
const detachRecheck = time.Second

// Provider is the AWS Fencer. It is safe for concurrent use.
type Provider struct {
	*power.Fencer[Target]
	power.Settings
	// defaults is the SDK's default configuration (credential chain), loaded once on first use.
	defaults     func(ctx context.Context) (awssdk.Config, error)
	defaultsOnce sync.Once
	defaultsCfg  awssdk.Config
	defaultsErr  error
	// http is shared by every call's EC2 client: one pool of connections to the endpoints,
	// rather than a transport per call whose idle connections outlive it.
	http *http.Client
}

// New returns an AWS provider that reads Nodes and Secrets through reader. Options: power.WithTimeout
// (default DefaultTimeout), power.WithLogger.
func New(reader client.Reader, opts ...power.Option) *Provider {
	p := &Provider{Settings: power.NewSettings(reader, DefaultTimeout, opts),
		defaults: func(ctx context.Context) (awssdk.Config, error) { return config.LoadDefaultConfig(ctx) }}
	p.http = &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{Timeout: p.Timeout / 3}).DialContext,
		TLSHandshakeTimeout: p.Timeout / 3, Proxy: http.ProxyFromEnvironment, IdleConnTimeout: 90 * time.Second}}
	p.Fencer = power.NewFencer[Target](ProviderName, p, "EC2", hints)
	return p
}

// PowerOff stops the instance with Force: its OS is not asked to shut down.
func (p *Provider) PowerOff(ctx context.Context, t Target) error {
	return p.call(ctx, t, "stopping", func(ctx context.Context, c *ec2.Client) error {
		_, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{t.InstanceID}, Force: awssdk.Bool(true)})
		return err
	})
}

// PowerOn starts the instance. Fencing never calls it; recovery and tests do.
func (p *Provider) PowerOn(ctx context.Context, t Target) error {
	return p.call(ctx, t, "starting", func(ctx context.Context, c *ec2.Client) error {
		_, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{t.InstanceID}})
		return err
	})
}

// Hibernated is the power state of an instance that reads "stopped" after a hibernation (its
// state reason says so: Client.UserInitiatedHibernate, or a Spot interruption that
// hibernates). It is not off: its memory was saved to its root volume, and when it is started
// again (by anyone, and for a Spot instance by EC2 itself once capacity returns) it resumes the
// node's processes where they stopped, the database's among them. A StopInstances of it
// changes nothing, so a fence of it is not confirmed and fails once the method's time is up.
const Hibernated power.State = "stopped-hibernated (its memory kept: started, it resumes the node's processes)"

// PowerState reads the instance's state: stopped is Off (Hibernated after a hibernation),
// terminated Gone, any other state (pending, running, stopping, shutting-down) is reported as
// it is, and is not off.
func (p *Provider) PowerState(ctx context.Context, t Target) (power.State, error) {
	state := power.Unknown
	err := p.call(ctx, t, "reading the state of", func(ctx context.Context, c *ec2.Client) error {
		out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{t.InstanceID}})
		if err != nil {
			return err
		}
		for _, r := range out.Reservations {
			for _, i := range r.Instances {
				if awssdk.ToString(i.InstanceId) == t.InstanceID && i.State != nil {
					switch name := string(i.State.Name); name {
					case "stopped":
						state = power.Off
						if hibernated(i.StateReason) {
							state = Hibernated
						}
					case "terminated":
						state = power.Gone
					default:
						state = power.State(name)
					}
					return nil
				}
			}
		}
		return fmt.Errorf("DescribeInstances did not list instance %s", t.InstanceID)
	})
	if err != nil {
		return power.Unknown, err
	}
	return state, nil
}

// hibernated says whether an instance's state reason is a hibernation. EC2 documents
// Client.UserInitiatedHibernate; the reason of a Spot interruption that hibernates is matched
// by the word.
func hibernated(r *ec2types.StateReason) bool {
	if r == nil {
		return false
	}
	return strings.Contains(strings.ToLower(awssdk.ToString(r.Code)+" "+awssdk.ToString(r.Message)), "hibernat")
}

// ReleaseVolumes force-detaches from the node's instance the EBS volumes of the node's
// attachments being released (Request.Volumes, by ebsVolumes; DetachVolume with Force; a volume
// already detaching is left to finish), and is Confirmed only when DescribeVolumes lists none of
// them attached to the instance any more. Every other volume attached to the instance stays:
// its root volume (the machine's system: without it the recovery's power-on fails), the node's
// own data volume (container images, the kubelet's state: Bottlerocket's second volume), and
// the volumes of pods that stay on the node (Request.Volumes leaves them out). A volume of
// Request.Volumes that EC2 does not list attached to the instance is nothing to detach.
func (p *Provider) ReleaseVolumes(ctx context.Context, req providers.Request) (providers.Status, error) {
	t, err := p.BoundTarget(ctx, req) // only the instance the fence stopped
	if providers.ReasonOf(err) == providers.ReasonTargetChanged {
		return providers.Status{}, providers.WithHint(err, "The Node was registered anew for another instance: nothing is detached from it. Force-detach the workload's volumes from the instance this fence stopped by hand (aws ec2 detach-volume --force); this step cannot list them and keeps waiting: delete this NodeFence once they are detached.")
	}
	if err != nil {
		return providers.Status{}, err
	}
	wanted := ebsVolumes(req.Volumes)
	if len(wanted) == 0 {
		return providers.Status{State: providers.Confirmed, Message: fmt.Sprintf(
			"no attachment being released names an EBS volume (%s): nothing detached from instance %s", countVolumes(len(req.Volumes)), t.InstanceID)}, nil
	}
	var root string
	err = p.call(ctx, t, "reading the root device of", func(ctx context.Context, c *ec2.Client) error {
		out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{t.InstanceID}})
		if err != nil {
			return err
		}
		for _, r := range out.Reservations {
			for _, i := range r.Instances {
				if awssdk.ToString(i.InstanceId) == t.InstanceID {
					root = awssdk.ToString(i.RootDeviceName)
					return nil
				}
			}
		}
		return fmt.Errorf("DescribeInstances did not list instance %s", t.InstanceID)
	})
	if err != nil {
		return providers.Status{}, err
	}
	var attached []ec2types.Volume
	kept := 0
	err = p.call(ctx, t, "listing the EBS volumes of", func(ctx context.Context, c *ec2.Client) error {
		// Every page, by NextToken, without ec2.NewDescribeVolumesPaginator: handing the
		// paginator the client makes *ec2.Client an interface value, and as the binary also
		// looks methods up by reflection (a dependency's), the linker then keeps every exported
		// method of it, every EC2 operation: 19 MB of code, 38 MB of the controller's binary,
		// and 7 MiB of its resident memory (bench-scale at 40 nodes, 74.9 against 67.7 MiB).
		// The binary test in cmd/palisade-controller keeps them out. Unlike the paginator, a
		// token answered twice is an error, not a page to ask for again until the call's
		// timeout: the listing could not be read whole, and the step is not confirmed on it.
		in := &ec2.DescribeVolumesInput{
			Filters: []ec2types.Filter{{Name: awssdk.String("attachment.instance-id"), Values: []string{t.InstanceID}}}}
		for {
			out, err := c.DescribeVolumes(ctx, in)
			if err != nil {
				return err
			}
			for _, v := range out.Volumes {
				if wanted[awssdk.ToString(v.VolumeId)] && !isRoot(v, t.InstanceID, root) {
					attached = append(attached, v)
				} else {
					kept++
				}
			}
			next := awssdk.ToString(out.NextToken)
			if next == "" {
				return nil
			}
			if next == awssdk.ToString(in.NextToken) {
				return fmt.Errorf("DescribeVolumes answered NextToken %q twice; the volumes attached to instance %s could not be listed whole", next, t.InstanceID)
			}
			in.NextToken = out.NextToken
		}
	})
	if err != nil {
		return providers.Status{}, err
	}
	left := ""
	if kept > 0 {
		left = fmt.Sprintf("; %s of the instance left attached (its root, the node's own, those of pods that stay)", countVolumes(kept))
	}
	if len(attached) == 0 {
		return providers.Status{State: providers.Confirmed, Message: fmt.Sprintf("none of EBS volumes %s is attached to instance %s any more%s",
			strings.Join(slices.Sorted(maps.Keys(wanted)), ", "), t.InstanceID, left)}, nil
	}
	var detaching, ordered []string
	for _, v := range attached {
		vol := awssdk.ToString(v.VolumeId)
		detaching = append(detaching, vol)
		for _, a := range v.Attachments {
			if awssdk.ToString(a.InstanceId) != t.InstanceID || a.State == ec2types.VolumeAttachmentStateDetaching {
				continue
			}
			err := p.call(ctx, t, "force-detaching volume "+vol+" from", func(ctx context.Context, c *ec2.Client) error {
				_, err := c.DetachVolume(ctx, &ec2.DetachVolumeInput{VolumeId: v.VolumeId, InstanceId: awssdk.String(t.InstanceID), Force: awssdk.Bool(true)})
				return err
			})
			if err != nil {
				return providers.Status{}, err
			}
			ordered = append(ordered, vol)
		}
	}
	msg := fmt.Sprintf("waiting for EBS volumes %s to detach from instance %s%s", strings.Join(detaching, ", "), t.InstanceID, left)
	if len(ordered) > 0 {
		msg = fmt.Sprintf("force-detached EBS volumes %s from instance %s; %s", strings.Join(ordered, ", "), t.InstanceID, msg)
	}
	return providers.Status{State: providers.InProgress, Reason: "VolumesDetaching", Message: msg, RetryAfter: detachRecheck}, nil
}

// ebsVolumes picks the EBS volume IDs among the volumes of the node's attachments: a handle
// that is an EBS volume ID, "vol-" and hexadecimal digits, as the EBS CSI driver's handles and
// in-tree awsElasticBlockStore IDs are (the latter also as "aws://<zone>/vol-…"), whatever the
// driver's name (a driver renamed or wrapped still names the volume): EC2 then says whether
// that volume is attached to the stopped instance, and only then is it detached.
func ebsVolumes(vols []providers.Volume) map[string]bool {
	ids := map[string]bool{}
	for _, v := range vols {
		h := v.Handle
		if rest, ok := strings.CutPrefix(h, "aws://"); ok {
			_, h, _ = strings.Cut(rest, "/")
		}
		if isVolumeID(h) {
			ids[h] = true
		}
	}
	return ids
}

// isVolumeID says whether s is an EBS volume ID: "vol-" and hexadecimal digits.
func isVolumeID(s string) bool {
	hex, ok := strings.CutPrefix(s, "vol-")
	return ok && hex != "" && strings.Trim(hex, "0123456789abcdef") == ""
}

func countVolumes(n int) string {
	if n == 1 {
		return "1 volume"
	}
	return fmt.Sprintf("%d volumes", n)
}

// isRoot says whether the volume is attached to the instance as its root device root.
func isRoot(v ec2types.Volume, instance, root string) bool {
	for _, a := range v.Attachments {
		if awssdk.ToString(a.InstanceId) == instance && root != "" && awssdk.ToString(a.Device) == root {
			return true
		}
	}
	return false
}

// call builds the EC2 client of the target, runs fn within the per-call timeout and
// classifies any error.
func (p *Provider) call(ctx context.Context, t Target, verb string, fn func(context.Context, *ec2.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	start := time.Now()
	log := p.Log.WithValues("Node", klog.KRef("", t.Node), "instance", t.InstanceID, "region", t.Region, "action", verb)
	c, err := p.client(ctx, t)
	if err == nil {
		err = fn(ctx, c)
	}
	if err == nil {
		log.V(1).Info("EC2 call done", "duration", time.Since(start))
		return nil
	}
	reason, cause := classify(ctx, err, t)
	log.V(1).Info("EC2 call failed", "duration", time.Since(start), "reason", reason, "error", cause.Error())
	return providers.NewError(reason, fmt.Errorf("%s instance of node %s: %w", verb, t, cause))
}

func (p *Provider) client(ctx context.Context, t Target) (*ec2.Client, error) {
	creds := t.Credentials
	if creds == nil {
		p.defaultsOnce.Do(func() { p.defaultsCfg, p.defaultsErr = p.defaults(context.WithoutCancel(ctx)) })
		if p.defaultsErr != nil {
			return nil, providers.NewError(providers.ReasonCloudAuthFailed, fmt.Errorf("loading the AWS SDK's default credentials: %w", p.defaultsErr))
		}
		creds = p.defaultsCfg.Credentials
	}
	opts := ec2.Options{Region: t.Region, Credentials: creds, HTTPClient: p.http}
	if t.Endpoint != "" {
		opts.BaseEndpoint = awssdk.String(t.Endpoint)
	}
	return ec2.New(opts), nil
}

// classify turns an SDK error into a Reason and an error text without the secret key.
func classify(ctx context.Context, err error, t Target) (providers.Reason, error) {
	if ctxErr := ctx.Err(); ctxErr != nil || errors.Is(err, context.DeadlineExceeded) {
		if ctxErr == nil {
			ctxErr = context.DeadlineExceeded
		}
		return providers.ReasonCloudUnreachable, fmt.Errorf("no answer in time, the command may or may not have taken effect: %w", ctxErr)
	}
	msg := strings.Join(strings.Fields(err.Error()), " ")
	if t.secretKey != "" {
		msg = strings.ReplaceAll(msg, t.secretKey, "[redacted]")
	}
	if reason := providers.ReasonOf(err); errors.As(err, new(*providers.Error)) {
		return reason, errors.New(msg)
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch code := api.ErrorCode(); {
		case code == "AuthFailure", code == "SignatureDoesNotMatch", code == "UnauthorizedOperation",
			code == "InvalidClientTokenId", code == "RequestExpired", code == "OptInRequired":
			return providers.ReasonCloudAuthFailed, errors.New(msg)
		case strings.HasPrefix(code, "InvalidInstanceID"):
			return providers.ReasonBadTarget, fmt.Errorf("%s (EC2 in %s does not know the instance: check the node's providerID and the method's region, account and endpoint)", msg, t.Region)
		}
		return providers.ReasonCloudRefused, errors.New(msg)
	}
	if strings.Contains(msg, "failed to retrieve credentials") || strings.Contains(msg, "failed to refresh cached credentials") {
		return providers.ReasonCloudAuthFailed, fmt.Errorf("no AWS credentials: %s (give the controller an IAM role, through IRSA or the instance profile, or set the method's aws.credentialsSecretRef)", msg)
	}
	var netErr net.Error
	if errors.As(err, &netErr) || strings.Contains(msg, "connection refused") || strings.Contains(msg, "no such host") {
		return providers.ReasonCloudUnreachable, errors.New(msg)
	}
	return providers.ReasonCloudRefused, errors.New(msg)
}
