package cuda

import (
	"fmt"
	"math"
)

// SetShare gives the instance a fraction of the GPU's SMs: a green context
// of at least ceil(share x SMs) SMs (SetSMs), or the whole device for a
// share of 1. It is how an IF's share (GSLICE's spatial share) becomes an
// SM partition; the IF manager calls it on a shadow instance before the
// swap that changes the share. Errors wrap ErrNoGreen when the driver has
// no green contexts.
func (i *Instance) SetShare(share float64) error {
	if math.IsNaN(share) || share <= 0 || share > 1 {
		return fmt.Errorf("cuda: SetShare(%v): want 0 < share <= 1", share)
	}
	total := i.b.SMs()
	sms := int(math.Ceil(share * float64(total)))
	if sms >= total {
		sms = 0 // the whole device
	}
	return i.SetSMs(sms)
}
