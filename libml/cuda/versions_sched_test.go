package cuda

import (
	"math/rand/v2"
	"testing"
)

// PadVersion: the fastest version that passes Rule 1 (block time below
// the RT kernel's remaining time), not the fastest overall; none when no
// version passes, when the RT kernel fills the device (Rule 2) or for
// versions without blocks, occupancy or block time.
func TestPadVersion(t *testing.T) {
	rt := PadRT{Grid: 100, Occupancy: 2, RemainingNs: 50e3}
	big := PadCand{Grid: 40, Occupancy: 3, BlockNs: 80e3, KernelNs: 1e6}    // 64 x 64: too long a block
	small := PadCand{Grid: 160, Occupancy: 3, BlockNs: 20e3, KernelNs: 2e6} // 32 x 32: fits
	if got := PadVersion(rt, 108, []PadCand{big, small}); got != 1 {
		t.Errorf("only the small tile fits: version %d", got)
	}
	fits := big
	fits.BlockNs = 40e3
	if got := PadVersion(rt, 108, []PadCand{small, fits}); got != 1 {
		t.Errorf("both fit: version %d, want the faster (1)", got)
	}
	if got := PadVersion(PadRT{Grid: 100, Occupancy: 2, RemainingNs: 10e3}, 108, []PadCand{big, small}); got != -1 {
		t.Errorf("no version fits: %d", got)
	}
	if got := PadVersion(PadRT{Grid: 216, Occupancy: 2, RemainingNs: 50e3}, 108, []PadCand{small}); got != -1 {
		t.Errorf("RT kernel fills the device: %d", got)
	}
	if got := PadVersion(rt, 108, []PadCand{{Grid: 0, Occupancy: 3, BlockNs: 1, KernelNs: 1}, {Grid: 5, Occupancy: 0, BlockNs: 1, KernelNs: 1},
		{Grid: 5, Occupancy: 1, BlockNs: 0, KernelNs: 1}, small}); got != 3 {
		t.Errorf("unusable versions chosen: %d", got)
	}
	if got := PadVersion(rt, 108, nil); got != -1 {
		t.Errorf("no versions: %d", got)
	}
	// against a brute force on random sets
	r := rand.New(rand.NewPCG(5, 6))
	for iter := 0; iter < 5000; iter++ {
		sms := 1 + r.IntN(132)
		rt, vs := randPad(r, r.IntN(5))
		for k := range vs {
			vs[k].KernelNs = float64(r.IntN(6))
		}
		got := PadVersion(rt, sms, vs)
		want := -1
		if PadRTSMs(rt, sms) < sms && rt.RemainingNs > 0 {
			for k, c := range vs {
				if c.Grid > 0 && c.Occupancy > 0 && c.BlockNs > 0 && c.BlockNs < rt.RemainingNs &&
					(want < 0 || c.KernelNs < vs[want].KernelNs) {
					want = k
				}
			}
		}
		if got != want {
			t.Fatalf("PadVersion(%+v, %d, %+v) = %d, want %d", rt, sms, vs, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { PadVersion(rt, 108, []PadCand{big, small}) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
