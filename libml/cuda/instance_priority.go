package cuda

import (
	"errors"
	"fmt"
)

// RTPriority is the stream priority REEF gives real-time instances: the
// driver clamps it to the device's highest (e.g. -5), so RT kernels are
// dispatched ahead of best-effort ones queued on priority-0 streams.
const RTPriority = -10

// SetPriority moves the instance to a new stream of priority prio in the
// same context (its partition, or the whole device): lower numbers are
// higher priorities, 0 is the default, and the driver clamps prio to the
// device's range. Work queued on the old stream is waited for first. The
// priority survives SetSMs.
func (i *Instance) SetPriority(prio int) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return errors.New("cuda: SetPriority: instance is closed")
	}
	if prio == i.prio {
		return nil
	}
	old := i.ln
	if err := old.s.Sync(); err != nil {
		return fmt.Errorf("cuda: SetPriority(%d): %w", prio, err)
	}
	ln, err := newLane(old.ctx, old.own, i.b.opts.Window, prio)
	if err != nil {
		return fmt.Errorf("cuda: SetPriority(%d): %w", prio, err)
	}
	// the context (a partition the instance owns) moves to the new lane
	old.own = false
	i.ln, i.prio = ln, prio
	i.gathered = 0 // a gather is queued per stream: gather again
	if err := old.close(); err != nil {
		return fmt.Errorf("cuda: SetPriority(%d): closing the old stream: %w", prio, err)
	}
	return nil
}

// Priority is the priority of the instance's stream (SetPriority).
func (i *Instance) Priority() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.prio
}
