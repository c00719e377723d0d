package cuda

import (
	"fmt"
	"math"
)

// SetShare gives the instance a share of the GPU's SMs: the whole
// device for a share of 1, else a green context (SetSMs) of floor(share
// x n) of the n SM groups the driver splits the device into, at least
// one (Backend.shareSMs), so that IFs whose shares sum to at most 1 run
// on SMs that do not overlap (where each share is at least 1/n: a
// smaller one still takes a whole group). It is how an IF's share
// (GSLICE's spatial share) becomes an SM partition; the IF manager calls
// it on a shadow instance before the swap that changes the share. SMs
// reports what it got. Errors wrap ErrNoGreen when the driver has no
// green contexts.
func (i *Instance) SetShare(share float64) error {
	if math.IsNaN(share) || share <= 0 || share > 1 {
		return fmt.Errorf("cuda: SetShare(%v): want 0 < share <= 1", share)
	}
	if share == 1 {
		return i.SetSMs(0) // the whole device
	}
	sms, err := i.b.shareSMs(share)
	if err != nil {
		return fmt.Errorf("cuda: SetShare(%v): %w", share, err)
	}
	return i.SetSMs(sms)
}
