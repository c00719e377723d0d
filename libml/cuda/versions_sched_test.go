package cuda

import (
	"math/rand/v2"
	"testing"
)

// Dominance (REEF §5.3): a version no worse in kernel time, block time,
// block count and occupancy and better in one dominates; better in one and
// worse in another does not; equal versions do not dominate each other.
func TestDominates(t *testing.T) {
	base := KernelProfile{Grid: 100, Occupancy: 3, KernelNs: 1e5, BlockNs: 1e4}
	with := func(f func(*KernelProfile)) KernelProfile {
		k := base
		f(&k)
		return k
	}
	for _, c := range []struct {
		name string
		a, b KernelProfile
		want bool
	}{
		{"equal", base, base, false},
		{"faster kernel", with(func(k *KernelProfile) { k.KernelNs = 9e4 }), base, true},
		{"shorter blocks", with(func(k *KernelProfile) { k.BlockNs = 5e3 }), base, true},
		{"fewer blocks", with(func(k *KernelProfile) { k.Grid = 25 }), base, true},
		{"higher occupancy", with(func(k *KernelProfile) { k.Occupancy = 4 }), base, true},
		{"slower kernel", with(func(k *KernelProfile) { k.KernelNs = 2e5 }), base, false},
		// the 32 x 32 tile's trade: shorter blocks, more of them
		{"shorter blocks, more of them", with(func(k *KernelProfile) { k.BlockNs = 3e3; k.Grid = 400 }), base, false},
		{"faster, lower occupancy", with(func(k *KernelProfile) { k.KernelNs = 5e4; k.Occupancy = 2 }), base, false},
	} {
		if got := Dominates(&c.a, &c.b); got != c.want {
			t.Errorf("%s: Dominates = %v, want %v", c.name, got, c.want)
		}
		if c.want && Dominates(&c.b, &c.a) {
			t.Errorf("%s: dominance both ways", c.name)
		}
	}
}

// PruneDominated marks, per kernel, the versions another version of the
// same kernel dominates, and the later of equal ones; never across
// kernels, never every version of a kernel.
func TestPruneDominated(t *testing.T) {
	mp := &ModelProfile{Kernels: []KernelProfile{
		// kernel 0: version 1 trades block time for blocks: both stay
		{Index: 0, Version: 0, Grid: 12, Occupancy: 3, KernelNs: 4e4, BlockNs: 9e3},
		{Index: 0, Version: 1, Grid: 48, Occupancy: 3, KernelNs: 5e4, BlockNs: 3e3},
		// kernel 2: one version (a dominated-looking one of another
		// kernel must not prune it)
		{Index: 2, Version: 0, Grid: 500, Occupancy: 1, KernelNs: 9e5, BlockNs: 9e4},
		// kernel 3: version 1 as many blocks, faster in both: version 0
		// goes
		{Index: 3, Version: 0, Grid: 1, Occupancy: 3, KernelNs: 2e4, BlockNs: 2e4},
		{Index: 3, Version: 1, Grid: 1, Occupancy: 3, KernelNs: 1e4, BlockNs: 1e4},
		// kernel 4: equal versions: the first stays
		{Index: 4, Version: 0, Grid: 8, Occupancy: 2, KernelNs: 3e4, BlockNs: 3e3},
		{Index: 4, Version: 1, Grid: 8, Occupancy: 2, KernelNs: 3e4, BlockNs: 3e3},
		// kernel 5: version 1 slower in everything
		{Index: 5, Version: 0, Grid: 10, Occupancy: 3, KernelNs: 3e4, BlockNs: 3e3, Dominated: true},
		{Index: 5, Version: 1, Grid: 40, Occupancy: 3, KernelNs: 6e4, BlockNs: 4e3},
	}}
	mp.PruneDominated()
	want := []bool{false, false, false, true, false, false, true, false, true}
	for k, kp := range mp.Kernels {
		if kp.Dominated != want[k] {
			t.Errorf("entry %d (kernel %d version %d): dominated %v, want %v", k, kp.Index, kp.Version, kp.Dominated, want[k])
		}
	}
	// random sets: the survivors are exactly the versions nothing
	// dominates, and at least one survives
	r := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 2000; iter++ {
		n := 1 + r.IntN(5)
		mp := &ModelProfile{}
		for v := 0; v < n; v++ {
			mp.Kernels = append(mp.Kernels, KernelProfile{Index: 7, Version: v, Grid: 1 + r.IntN(4),
				Occupancy: 1 + r.IntN(3), KernelNs: float64(1 + r.IntN(4)), BlockNs: float64(1 + r.IntN(4))})
		}
		mp.PruneDominated()
		kept := 0
		for k := range mp.Kernels {
			a := &mp.Kernels[k]
			beaten := false
			for j := range mp.Kernels {
				b := &mp.Kernels[j]
				if Dominates(b, a) || (j < k && sameCost(a, b)) {
					beaten = true
				}
			}
			if a.Dominated != beaten {
				t.Fatalf("%+v: version %d dominated %v, want %v", mp.Kernels, k, a.Dominated, beaten)
			}
			if !a.Dominated {
				kept++
			}
		}
		if kept == 0 {
			t.Fatalf("every version pruned: %+v", mp.Kernels)
		}
	}
}

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
