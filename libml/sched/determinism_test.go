package sched

import (
	"fmt"
	"testing"

	ncpu "sluice/native/cpu"
)

// TestDeterminismUnderReef: the same input, run as a BE job many times
// under reef while RT jobs preempt it and padding runs parts of it, gives
// the output the model gives alone (seq, one job at a time, version 0)
// bit for bit, every time; so do the RT jobs. Every run is scripted (see
// rtIntoBE): the BE job is preempted at a different kernel and block each
// time, restored (at block level where the kernel is idempotent), offered
// to padding, padded for one block, a few blocks or to its end beside a
// held RT kernel, and resumed in the version padding left it in. The BE
// model's profile is data that makes the BE streams, the added in-block
// checks and padding use every version; the RT model's makes rule 1 admit
// every BE block. Undisturbed BE jobs run in between.
//
// With SCHED_TEST_PIN_VERSIONS=1 every kernel runs in version 0: the test
// must pass so on any GEMM; without it, it passes once every version and
// preemptible copy of a kernel computes the same bits.
func TestDeterminismUnderReef(t *testing.T) {
	if !ncpu.ChecksCompiled() {
		t.Skip("preemption checks compiled out")
	}
	const rtKey = "squeeze"
	rtWant := reference(t, rtKey, 8)[8]
	for _, tc := range []struct {
		key  string
		runs int
	}{{"resnet", 12}, {"bert", 12}} {
		t.Run(tc.key, func(t *testing.T) {
			want := reference(t, tc.key, 7)[7]
			s := newSched(t, Config{Policy: PolicyREEF, BEQueues: 1})
			releaseHolds(t, s)
			rt := load(t, s, rtKey, ModelOptions{Profile: rtData(t, rtKey)})
			be := load(t, s, tc.key, ModelOptions{Profile: beData(t, tc.key)})
			vers := map[int]int{}
			for _, v := range be.prVer {
				vers[v]++
			}
			live, rtLive := liveKernels(be), liveKernels(rt)
			nk := len(be.prog.Kernels)
			check := func(what string, j *Job, want []float32) {
				t.Helper()
				if d := sameBits(j.Out, want); d != "" {
					t.Errorf("%s (%d preemptions, %d padded blocks): %s", what, j.Preemptions, j.PadBlocks, d)
				}
			}
			for i := 0; i < tc.runs; i++ {
				// undisturbed: the BE streams' versions and checks
				u := job(be, BE, 0, 7)
				if err := s.Submit(u); err != nil {
					t.Fatal(err)
				}
				if err := u.Wait(); err != nil {
					t.Fatal(err)
				}
				check("undisturbed BE job", u, want)
				// preempted at kernel k, block blk of the version the BE
				// stream runs it in
				k := live[1+(i*7)%(len(live)-1)]
				grid := be.prof.Kernels[k].Versions[be.prVer[k]].Grid
				blk := int64(i) % grid
				rtAt := rtLive[1+i%(len(rtLive)-1)]
				var padded func(ncpu.Cursor) bool
				switch i % 3 {
				case 0:
					padded = func(c ncpu.Cursor) bool { return c.Blocks >= 1 }
				case 1:
					padded = func(c ncpu.Cursor) bool { return c.Blocks >= 7 || c.K >= nk }
				default:
					padded = func(c ncpu.Cursor) bool { return c.K >= nk }
				}
				b, r := job(be, BE, 0, 7), job(rt, RT, 0, 8)
				rtIntoBE(t, s, b, r, k, blk, rtAt, padded)
				if b.Preemptions != 1 || b.PadBlocks == 0 {
					t.Fatalf("run %d: BE job preempted %d times, %d padded blocks: the script did not run", i, b.Preemptions, b.PadBlocks)
				}
				check(fmt.Sprintf("run %d: BE job preempted at kernel %d block %d, RT held at kernel %d", i, k, blk, rtAt), b, want)
				check("RT job", r, rtWant)
			}
			st := s.Stats()
			if st.Preemptions != int64(tc.runs) || st.PadBlocks == 0 || st.Restores != int64(tc.runs) {
				t.Fatalf("stats: %d preemptions, %d restores, %d padded blocks for %d scripted runs", st.Preemptions, st.Restores, st.PadBlocks, tc.runs)
			}
			t.Logf("%d runs: %d preemptions (%d restores block-level), %d padded blocks, %d BE jobs finished by padding; BE stream versions %v",
				tc.runs, st.Preemptions, st.BlockRestores, st.PadBlocks, st.PadJobs, vers)
		})
	}
}
