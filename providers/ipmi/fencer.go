package ipmi

import (
	"context"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
)

// hints tell an operator what to look at for each kind of failure.
var hints = map[providers.Reason]string{
	providers.ReasonUnreachable: "Check the node's " + v1alpha1.AnnotationBMCAddress + " annotation and the network path from the controller to the BMC, then delete this NodeFence to try again.",
	providers.ReasonAuthFailed:  "The BMC refused the credentials: check the username and password in the BMC Secret, then delete this NodeFence to try again.",
	providers.ReasonRefused:     "The BMC answered but did not carry out the command: check the BMC's own logs.",
	providers.ReasonBadTarget:   "Fix the node's BMC settings named above, then delete this NodeFence to try again.",
}

// ipmiSwitch is the Provider as a power.Switch.
type ipmiSwitch struct{ *Provider }

func (s ipmiSwitch) Target(ctx context.Context, req providers.Request) (Target, error) {
	return s.target(ctx, req)
}

// fencer is the power fence over IPMI.
func (p *Provider) fencer() *power.Fencer[Target] {
	return power.NewFencer[Target](ProviderName, ipmiSwitch{p}, "the BMC", hints)
}

// Fence sends the power-off command to the node's BMC.
func (p *Provider) Fence(ctx context.Context, req providers.Request) (providers.Status, error) {
	return p.fencer().Fence(ctx, req)
}

// FenceTarget names the node's machine (its BMC), for the fence to record before the off
// command (providers.TargetNamer).
func (p *Provider) FenceTarget(ctx context.Context, req providers.Request) (string, error) {
	return p.fencer().FenceTarget(ctx, req)
}

// Check reads the power state back until it is Off, re-sending the off command every
// power.ResendOffEvery attempts while it is not.
func (p *Provider) Check(ctx context.Context, req providers.Request) (providers.Status, error) {
	return p.fencer().Check(ctx, req)
}

// RestorePower powers the machine back on (recovery.powerOn, after the release).
func (p *Provider) RestorePower(ctx context.Context, req providers.Request) error {
	return p.fencer().RestorePower(ctx, req)
}

// End does nothing: a BMC holds no order.
func (p *Provider) End(context.Context, providers.Request) error { return nil }
