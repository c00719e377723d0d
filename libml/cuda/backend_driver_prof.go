//go:build linux && cgo

package cuda

import "fmt"

// occupancy is the driver's occupancy calculator for kernel's blocks of
// Threads threads (no dynamic shared memory).
func (g *drvGPU) occupancy(kernel string) (int, error) {
	f := g.ks.Func(kernel)
	if f == nil {
		return 0, fmt.Errorf("cuda: no kernel %s loaded", kernel)
	}
	return f.Occupancy()
}

// elapsedNs is the GPU time between start's record and e's.
func (e drvEvent) elapsedNs(start gpuEvent) (float64, error) {
	s, ok := start.(drvEvent)
	if !ok {
		return 0, fmt.Errorf("cuda: event timing across devices")
	}
	ms, err := e.e.Since(s.e)
	return float64(ms) * 1e6, err
}
