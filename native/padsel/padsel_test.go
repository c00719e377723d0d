package padsel

import (
	"math/rand/v2"
	"testing"
)

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// gpu is a version as a GPU offers it: OK (Rule 2) where it has an
// occupancy.
func gpu(v Version) Version {
	v.OK = b2i(v.Occupancy > 0)
	return v
}

// one is a job whose next kernel has one version (started, or the only
// one).
func one(v Version) Job {
	j := Job{N: 1}
	j.Versions[0] = gpu(v)
	return j
}

// randLaunch is a synthetic padded launch: an RT kernel and n BE jobs of
// one version each with grids, occupancies and times drawn around each
// other (seeded: the same cases every run).
func randLaunch(r *rand.Rand, n int) (RT, []Job) {
	rt := RT{Grid: 1 + r.IntN(400), Occupancy: 1 + r.IntN(8), RemainingNs: 1e3 + r.Float64()*2e5}
	if r.IntN(10) == 0 {
		rt.Occupancy = 0 // unknown
	}
	jobs := make([]Job, n)
	for k := range jobs {
		v := Version{Grid: int32(r.IntN(2000)), Occupancy: int32(r.IntN(9)), BlockNs: r.Float64() * 4e5}
		v.OK = b2i(v.Occupancy > 0)
		if r.IntN(8) == 0 {
			v.BlockNs = rt.RemainingNs // exactly at the limit: Rule 1 refuses it
		}
		jobs[k] = one(v)
	}
	return rt, jobs
}

// qualifies is Rule 1 with blocks and an occupancy, as the test states it.
func qualifies(v Version, rt RT) bool {
	return v.Grid > 0 && v.Occupancy > 0 && v.BlockNs > 0 && v.BlockNs < rt.RemainingNs
}

// The selector never breaks Rule 1 (a picked kernel's block time is below
// the RT kernel's remaining time) or Rule 2 (BE SM ranges are disjoint,
// non-empty, inside the device and outside the RT kernel's
// ceil(grid/occupancy) SMs; none when the RT kernel needs every SM), picks
// at most MaxBE kernels, each once, and pads whenever a qualifying
// candidate meets free SMs.
func TestLaunchRules(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var out []Pick
	padded := 0
	for iter := 0; iter < 20000; iter++ {
		sms := 1 + r.IntN(132)
		rt, jobs := randLaunch(r, r.IntN(12))
		out = Launch(rt, sms, jobs, out)
		rtSMs := sms
		if rt.Occupancy > 0 {
			rtSMs = min((rt.Grid+rt.Occupancy-1)/rt.Occupancy, sms)
		}
		if got := RTUnits(rt, sms); got != rtSMs {
			t.Fatalf("RTUnits(%+v, %d) = %d, want %d", rt, sms, got, rtSMs)
		}
		if rtSMs >= sms && len(out) > 0 {
			t.Fatalf("RT %+v needs all %d SMs, but padded with %+v", rt, sms, out)
		}
		if len(out) > MaxBE {
			t.Fatalf("%d picks", len(out))
		}
		seen := map[int32]bool{}
		lo := int32(rtSMs)
		for _, p := range out {
			if seen[p.Job] || p.Version != 0 {
				t.Fatalf("pick %+v: job picked twice or a version it has not", p)
			}
			seen[p.Job] = true
			if v := jobs[p.Job].Versions[0]; !qualifies(v, rt) {
				t.Fatalf("Rule 1: picked %+v for RT %+v", v, rt)
			}
			if p.Lo < lo || p.Hi <= p.Lo || p.Hi > int32(sms) {
				t.Fatalf("Rule 2: pick %+v (RT SMs [0, %d), next free %d, %d SMs)", p, rtSMs, lo, sms)
			}
			// the blocks its SMs finish within the RT kernel's time:
			// whole rounds of occupancy per SM, at least one, at most
			// the grid
			v := jobs[p.Job].Versions[0]
			rounds := max(int64(rt.RemainingNs/v.BlockNs), 1)
			if want := min(int64(v.Grid), rounds*int64(v.Occupancy)*int64(p.Hi-p.Lo)); int64(p.Blocks) != want {
				t.Fatalf("pick %+v of %+v beside RT %+v: %d blocks, want %d", p, v, rt, p.Blocks, want)
			}
			lo = p.Hi
		}
		if len(out) > 0 && lo != int32(sms) {
			t.Fatalf("picks %+v leave SMs [%d, %d) idle", out, lo, sms)
		}
		// work conservation: a qualifying job left out comes after the
		// last pick (the SMs or the MaxBE slots ran out before it)
		if rtSMs < sms {
			for k, j := range jobs {
				if !seen[int32(k)] && qualifies(j.Versions[0], rt) && (len(out) == 0 || out[len(out)-1].Job > int32(k)) {
					t.Fatalf("job %d %+v qualifies, not picked: %+v (RT SMs %d of %d)", k, j.Versions[0], out, rtSMs, sms)
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
// 5 rounds x 2 per SM: 4 SMs, all 40 blocks; one whose block is too long
// is skipped; the next takes the rest, 50 rounds of 1 block on each of its
// 54 SMs.
func TestLaunchExample(t *testing.T) {
	rt := RT{Grid: 100, Occupancy: 2, RemainingNs: 50e3}
	jobs := []Job{
		one(Version{Grid: 40, Occupancy: 2, BlockNs: 10e3}),
		one(Version{Grid: 1000, Occupancy: 4, BlockNs: 60e3}),
		one(Version{Grid: 100000, Occupancy: 1, BlockNs: 1e3}),
	}
	got := Launch(rt, 108, jobs, nil)
	want := []Pick{{Job: 0, Lo: 50, Hi: 54, Blocks: 40}, {Job: 2, Lo: 54, Hi: 108, Blocks: 54 * 50}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got := Launch(RT{Grid: 216, Occupancy: 2, RemainingNs: 50e3}, 108, jobs, nil); len(got) != 0 {
		t.Errorf("RT kernel filling the device padded: %+v", got)
	}
	if n := testing.AllocsPerRun(100, func() { got = Launch(rt, 108, jobs, got) }); n != 0 {
		t.Errorf("%v allocations per launch", n)
	}
}

// Versions (REEF §5.3): of a job's versions, the fastest that passes
// Rule 1 (block time below the RT kernel's remaining time) runs; none
// passes, the job is not picked; none when the RT kernel needs every SM.
func TestLaunchVersions(t *testing.T) {
	rt := RT{Grid: 100, Occupancy: 2, RemainingNs: 50e3}
	big := Version{Grid: 40, Occupancy: 3, BlockNs: 80e3, KernelNs: 1e6}    // 64 x 64: too long a block
	small := Version{Grid: 160, Occupancy: 3, BlockNs: 20e3, KernelNs: 2e6} // 32 x 32: fits
	fits := Version{Grid: 40, Occupancy: 3, BlockNs: 20e3, KernelNs: 3e6}   // fits, slower
	two := func(a, b Version) Job { j := Job{N: 2}; j.Versions[0], j.Versions[1] = gpu(a), gpu(b); return j }
	for _, c := range []struct {
		name string
		rt   RT
		job  Job
		want int32 // the version picked, -1 none
	}{
		{"the block that fits", rt, two(big, small), 1},
		{"the fastest of those that fit", rt, two(fits, small), 1},
		{"none fits rule 1", RT{Grid: 100, Occupancy: 2, RemainingNs: 10e3}, two(big, small), -1},
		{"the RT kernel fills the device", RT{Grid: 216, Occupancy: 2, RemainingNs: 50e3}, two(fits, small), -1},
		{"no blocks, no occupancy", rt, two(Version{Occupancy: 3, BlockNs: 1, KernelNs: 1}, Version{Grid: 5, BlockNs: 1, KernelNs: 1}), -1},
		{"no version", rt, Job{}, -1},
	} {
		got := Launch(c.rt, 108, []Job{c.job}, nil)
		if (c.want < 0) != (len(got) == 0) || (c.want >= 0 && got[0].Version != c.want) {
			t.Errorf("%s: picks %+v, want version %d", c.name, got, c.want)
		}
	}
	// against a brute force on random sets, through Choose (the cpu's
	// entry: every version admitted by its Rule 2 here)
	r := rand.New(rand.NewPCG(5, 6))
	for iter := 0; iter < 5000; iter++ {
		rt, jobs := randLaunch(r, r.IntN(5))
		vs := make([]Version, len(jobs))
		for k := range jobs {
			vs[k] = jobs[k].Versions[0]
			vs[k].KernelNs = float64(r.IntN(6))
			vs[k].OK = int32(r.IntN(4) % 3) // a third refused by Rule 2
		}
		got := Choose(vs, rt.RemainingNs, 100)
		want := -1
		for k, v := range vs {
			if v.OK != 0 && v.Grid > 0 && v.BlockNs > 0 && v.BlockNs < rt.RemainingNs && (want < 0 || v.KernelNs < vs[want].KernelNs) {
				want = k
			}
		}
		if got != want {
			t.Fatalf("Choose(%+v, %v) = %d, want %d", vs, rt.RemainingNs, got, want)
		}
	}
	// the cpu's margin: a block must be below pct percent of the time left
	v := []Version{{Grid: 1, Occupancy: 1, BlockNs: 60, KernelNs: 1, OK: 1}}
	if Choose(v, 100, 50) != -1 || Choose(v, 100, 70) != 0 || Choose(v, 100, 0) != 0 {
		t.Error("Rule 1's margin")
	}
}

// Selection time (REEF §6.5: 0.4 µs for one BE client, 1.2 µs for five;
// target 2 µs): an RT kernel and 1, 5 or 16 suspended BE jobs' next
// kernels, one cgo call per launch.
func BenchmarkLaunch(b *testing.B) {
	for _, n := range []int{1, 5, 16} {
		b.Run(map[int]string{1: "be1", 5: "be5", 16: "be16"}[n], func(b *testing.B) {
			r := rand.New(rand.NewPCG(9, uint64(n)))
			const sets = 64
			rts := make([]RT, sets)
			js := make([][]Job, sets)
			for k := range rts {
				rts[k], js[k] = randLaunch(r, n)
			}
			out := make([]Pick, 0, MaxBE)
			b.ReportAllocs()
			b.ResetTimer()
			for k := 0; k < b.N; k++ {
				out = Launch(rts[k%sets], 132, js[k%sets], out)
			}
		})
	}
}
