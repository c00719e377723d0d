package cpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	ncpu "sluice/native/cpu"
)

// Device is the cpu device (ARCHITECTURE.md §3): one pool of worker
// units (native/cpu threads, pinned to cores) that every user on the CPU
// shares. The cpu backend's instances and every scheduler (libml/sched,
// one per policy) make their streams on it, so IFs of different policies
// take turns on the same units instead of each starting threads of its
// own and oversubscribing the cores. The device outlives its users:
// Close it after the last one has let it go.
type Device struct {
	pool  *ncpu.Pool
	units int

	mu     sync.Mutex
	users  int
	padder any // the user that pads on the pool (one at a time)
	closed bool
}

// MaxUnits is the most worker units a device can have.
const MaxUnits = ncpu.MaxUnits

// NewDevice starts units worker units (0: one per CPU), pinned to the
// process's CPUs when pin is set.
func NewDevice(units int, pin bool) (*Device, error) {
	if units <= 0 {
		units = runtime.NumCPU()
	}
	units = min(units, ncpu.MaxUnits)
	p, err := ncpu.NewPool(units, pin)
	if err != nil {
		return nil, fmt.Errorf("cpu device: %w", err)
	}
	return &Device{pool: p, units: units}, nil
}

// Units is the number of worker units.
func (d *Device) Units() int { return d.units }

// Pool is the device's unit pool (for the packages that make streams on
// it: this one and libml/sched).
func (d *Device) Pool() *ncpu.Pool { return d.pool }

// Acquire registers a user of the device; Release ends it. Close refuses
// while users remain.
func (d *Device) Acquire() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("cpu device: closed")
	}
	d.users++
	return nil
}

// Release ends a user's Acquire (and its padding claim, if any).
func (d *Device) Release(user any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.users > 0 {
		d.users--
	}
	if user != nil && d.padder == user {
		d.padder = nil
	}
}

// Users is the number of users holding the device.
func (d *Device) Users() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.users
}

// ClaimPadding makes user the one that fills idle units with padding
// blocks (REEF §5: the pool has one padding slot). It fails when another
// user holds it; Release gives it back.
func (d *Device) ClaimPadding(user any) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.padder != nil && d.padder != user {
		return errors.New("cpu device: another scheduler pads on these units (one reef scheduler with padding per device)")
	}
	d.padder = user
	return nil
}

// Close stops the units. Every user must have released the device.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	if d.users > 0 {
		return fmt.Errorf("cpu device: %d users still hold it", d.users)
	}
	d.closed = true
	d.pool.Close()
	return nil
}
