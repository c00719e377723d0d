//go:build linux && cgo

package cuda

import (
	"fmt"

	"sluice/libml/cuda/internal/emu"
)

// Test hooks of the emulated device (emu_device.go).

// newEmuDev is the tests' emulated device: its launch log is on.
func newEmuDev(sms int, green bool) *emuDev { return newEmuDevice(sms, green, true) }

// leaks describes what is still allocated, registered or partitioned.
func (h *emuHooks) leaks() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.live) == 0 && len(h.regs) == 0 && h.parts == 0 {
		return ""
	}
	n := 0
	for _, sz := range h.live {
		n += sz
	}
	return fmt.Sprintf("%d allocations (%d bytes), %d regions, %d partitions", len(h.live), n, len(h.regs), h.parts)
}

// liveBytes is the emulated device memory allocated now.
func (h *emuHooks) liveBytes() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n int64
	for _, sz := range h.live {
		n += int64(sz)
	}
	return n
}

func (h *emuHooks) setBefore(f func(kernel string, exec int64)) {
	h.mu.Lock()
	h.before = f
	h.mu.Unlock()
}

func (h *emuHooks) armPreempt(exec int64, o emu.Options) {
	h.mu.Lock()
	h.preempt[exec] = o
	h.mu.Unlock()
}

func (h *emuHooks) launches() []emuLaunch {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.log
	h.log = nil
	return out
}

// maxInflight is the most kernels the stream ever had queued or running.
func (s *emuStream) maxInflight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxIn
}
