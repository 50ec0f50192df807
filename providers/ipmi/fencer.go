package ipmi

import (
	"context"
	"fmt"
	"time"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

// resendOffEvery re-sends the off command while the power still reads On: a BMC may drop it.
const resendOffEvery = 5

// hints tell an operator what to look at for each kind of failure.
var hints = map[providers.Reason]string{
	providers.ReasonUnreachable: "Check the node's " + v1alpha1.AnnotationBMCAddress + " annotation and the network path from the controller to the BMC, then delete this NodeFence to try again.",
	providers.ReasonAuthFailed:  "The BMC refused the credentials: check the username and password in the BMC Secret, then delete this NodeFence to try again.",
	providers.ReasonRefused:     "The BMC answered but did not carry out the command: check the BMC's own logs.",
	providers.ReasonBadTarget:   "Fix the node's BMC settings named above, then delete this NodeFence to try again.",
}

func withHint(err error) error {
	return providers.WithHint(err, hints[providers.ReasonOf(err)])
}

// Fence sends the power-off command to the node's BMC.
func (p *Provider) Fence(ctx context.Context, req providers.Request) (providers.Status, error) {
	t, err := p.target(ctx, req)
	if err != nil {
		return providers.Status{}, withHint(err)
	}
	if err := p.PowerOff(ctx, t); err != nil {
		return providers.Status{}, withHint(err)
	}
	return providers.Status{State: providers.InProgress, Message: fmt.Sprintf("power-off command accepted by the BMC of %s", t)}, nil
}

// Check reads the power state back until it is Off, re-sending the off command every
// resendOffEvery attempts while it is not.
func (p *Provider) Check(ctx context.Context, req providers.Request) (providers.Status, error) {
	t, err := p.target(ctx, req)
	if err != nil {
		return providers.Status{}, withHint(err)
	}
	state, err := p.PowerState(ctx, t)
	if err != nil {
		return providers.Status{}, withHint(err)
	}
	if state == PowerOff {
		return providers.Status{State: providers.Confirmed, Message: fmt.Sprintf("power state Off read back from the BMC of %s", t)}, nil
	}
	var elapsed time.Duration
	if start := req.Fence.Status.MethodStartTime; start != nil {
		elapsed = req.Now.Sub(start.Time).Round(100 * time.Millisecond)
	}
	if req.Expired {
		return providers.Status{State: providers.Failed, Reason: providers.ReasonPowerStillOn,
			Message: fmt.Sprintf("the BMC of %s still reports power %s %s after the off command; check the BMC and the machine, then delete this NodeFence to try again", t, state, elapsed)}, nil
	}
	if req.Attempt%resendOffEvery == 0 {
		if err := p.PowerOff(ctx, t); err != nil {
			return providers.Status{}, withHint(err)
		}
	}
	return providers.Status{State: providers.InProgress, Reason: providers.ReasonPowerStillOn,
		Message: fmt.Sprintf("power still reads %s %s after the off command", state, elapsed)}, nil
}

// End does nothing: a BMC holds no order.
func (p *Provider) End(context.Context, providers.Request) error { return nil }
