package cuda

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

// randPad is a synthetic profile: an RT kernel and n BE candidates with
// grids, occupancies and times drawn around each other.
func randPad(r *rand.Rand, n int) (PadRT, []PadCand) {
	rt := PadRT{Grid: 1 + r.IntN(400), Occupancy: 1 + r.IntN(8), RemainingNs: 1e3 + r.Float64()*2e5}
	if r.IntN(10) == 0 {
		rt.Occupancy = 0 // unknown
	}
	c := make([]PadCand, n)
	for k := range c {
		c[k] = PadCand{Grid: r.IntN(2000), Occupancy: r.IntN(9), BlockNs: r.Float64() * 4e5}
		if r.IntN(8) == 0 {
			c[k].BlockNs = rt.RemainingNs // exactly at the limit: Rule 1 refuses it
		}
	}
	return rt, c
}

// The selector never breaks Rule 1 (a picked kernel's block time is below
// the RT kernel's remaining time) or Rule 2 (BE SM ranges are disjoint,
// non-empty, inside the device and outside the RT kernel's
// ceil(grid/occupancy) SMs; none when the RT kernel needs every SM), picks
// at most PadMaxBE kernels, each once, and pads whenever a qualifying
// candidate meets free SMs.
func TestPadSelectRules(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var out []PadPick
	padded := 0
	for iter := 0; iter < 20000; iter++ {
		sms := 1 + r.IntN(132)
		rt, cands := randPad(r, r.IntN(12))
		out = PadSelect(rt, sms, cands, out)
		rtSMs := sms
		if rt.Occupancy > 0 {
			rtSMs = min((rt.Grid+rt.Occupancy-1)/rt.Occupancy, sms)
		}
		if got := PadRTSMs(rt, sms); got != rtSMs {
			t.Fatalf("PadRTSMs(%+v, %d) = %d, want %d", rt, sms, got, rtSMs)
		}
		if rtSMs >= sms && len(out) > 0 {
			t.Fatalf("RT %+v needs all %d SMs, but padded with %+v", rt, sms, out)
		}
		if len(out) > PadMaxBE {
			t.Fatalf("%d picks", len(out))
		}
		seen := map[int]bool{}
		lo := rtSMs
		for _, p := range out {
			c := cands[p.Cand]
			if seen[p.Cand] {
				t.Fatalf("candidate %d picked twice", p.Cand)
			}
			seen[p.Cand] = true
			if !(c.BlockNs > 0 && c.BlockNs < rt.RemainingNs) || c.Grid <= 0 || c.Occupancy <= 0 {
				t.Fatalf("Rule 1: picked %+v for RT %+v", c, rt)
			}
			if p.SMLo < lo || p.SMHi <= p.SMLo || p.SMHi > sms {
				t.Fatalf("Rule 2: pick %+v (RT SMs [0, %d), next free %d, %d SMs)", p, rtSMs, lo, sms)
			}
			lo = p.SMHi
		}
		if len(out) > 0 && lo != sms {
			t.Fatalf("picks %+v leave SMs [%d, %d) idle", out, lo, sms)
		}
		// work conservation: a qualifying candidate left out comes after
		// the last pick (the SMs or the PadMaxBE slots ran out before it)
		if rtSMs < sms {
			for k, c := range cands {
				if !seen[k] && c.Grid > 0 && c.Occupancy > 0 && c.BlockNs > 0 && c.BlockNs < rt.RemainingNs &&
					(len(out) == 0 || out[len(out)-1].Cand > k) {
					t.Fatalf("candidate %d %+v qualifies, not picked: %+v (RT SMs %d of %d)", k, c, out, rtSMs, sms)
				}
			}
		}
		if len(out) > 0 {
			padded++
		}
	}
	if padded < 1000 {
		t.Errorf("only %d of 20000 synthetic launches padded", padded)
	}
}

// A worked case: 108 SMs, an RT kernel of 100 blocks at 2 per SM needs
// 50; a BE kernel of 40 blocks of 10 µs beside an RT kernel of 50 µs runs
// 5 rounds x 2 per SM: 4 SMs; one whose block is too long is skipped; the
// next takes the rest.
func TestPadSelectExample(t *testing.T) {
	rt := PadRT{Grid: 100, Occupancy: 2, RemainingNs: 50e3}
	cands := []PadCand{
		{Grid: 40, Occupancy: 2, BlockNs: 10e3},
		{Grid: 1000, Occupancy: 4, BlockNs: 60e3},
		{Grid: 100000, Occupancy: 1, BlockNs: 1e3},
	}
	got := PadSelect(rt, 108, cands, nil)
	want := []PadPick{{Cand: 0, SMLo: 50, SMHi: 54}, {Cand: 2, SMLo: 54, SMHi: 108}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got := PadSelect(PadRT{Grid: 216, Occupancy: 2, RemainingNs: 50e3}, 108, cands, nil); len(got) != 0 {
		t.Errorf("RT kernel filling the device padded: %+v", got)
	}
}

// Selection time (REEF §6.5: 0.4 µs for one BE client, 1.2 µs for five;
// target 2 µs): an RT kernel and 5 or 16 suspended BE jobs' next kernels.
func BenchmarkPadSelect(b *testing.B) {
	for _, n := range []int{1, 5, 16} {
		b.Run(map[int]string{1: "be1", 5: "be5", 16: "be16"}[n], func(b *testing.B) {
			r := rand.New(rand.NewPCG(9, uint64(n)))
			const sets = 64
			rts := make([]PadRT, sets)
			cs := make([][]PadCand, sets)
			for k := range rts {
				rts[k], cs[k] = randPad(r, n)
			}
			out := make([]PadPick, 0, PadMaxBE)
			b.ReportAllocs()
			b.ResetTimer()
			for k := 0; k < b.N; k++ {
				out = PadSelect(rts[k%sets], 132, cs[k%sets], out)
			}
		})
	}
}

// SM ids with gaps (as %smid may have): SM index ranges map onto ranges
// of the ids seen; ids 0..SMs-1, or fewer ids than SMs seen, leave the
// identity.
func TestPadSMIDs(t *testing.T) {
	clock := func(ids ...uint32) []byte {
		b := make([]byte, 16*3*len(ids))
		for k := 0; k < 3*len(ids); k++ {
			binary.LittleEndian.PutUint64(b[16*k:], uint64(1000+k))
			binary.LittleEndian.PutUint64(b[16*k+8:], uint64(ids[(k*7)%len(ids)]))
		}
		return b
	}
	ids := distinctSMIDs(clock(7, 0, 2, 5, 1, 4), 6)
	if !slices.Equal(ids, []uint32{0, 1, 2, 4, 5, 7}) {
		t.Fatalf("ids %v", ids)
	}
	pb := &padBufs{smid: ids}
	for _, c := range []struct{ lo, hi, wlo, whi int }{{0, 3, 0, 3}, {3, 6, 4, 8}, {3, 4, 4, 5}, {5, 6, 7, 8}, {2, 2, 2, 2}} {
		if lo, hi := pb.smRange(c.lo, c.hi); lo != uint32(c.wlo) || hi != uint32(c.whi) {
			t.Errorf("SMs [%d, %d) -> ids [%d, %d), want [%d, %d)", c.lo, c.hi, lo, hi, c.wlo, c.whi)
		}
	}
	if ids := distinctSMIDs(clock(3, 0, 2, 1), 4); ids != nil {
		t.Errorf("ids 0..3 of 4 SMs: %v, want the identity", ids)
	}
	if ids := distinctSMIDs(clock(0, 2, 9), 4); ids != nil {
		t.Errorf("3 ids of 4 SMs: %v, want the identity", ids)
	}
	if lo, hi := (&padBufs{}).smRange(2, 5); lo != 2 || hi != 5 {
		t.Errorf("identity: [%d, %d)", lo, hi)
	}
}
