/*
 * timer.cu: probes of the device clock and of preemption latency.
 *
 *   CLOCK  out (u64 pairs): [2b] = %globaltimer at block b's start,
 *          [2b+1] = its SM id. Shows the timer and how blocks spread over
 *          SMs (the padding kernel's assumption).
 *   SPIN   the preemption-latency probe: every block works in rounds of
 *          p[1] dependent FMAs per thread, polling the flag once per round
 *          (the poll every long kernel does), until the flag is seen or
 *          p[0] ns have passed. out (u64 triples): [3b] = start,
 *          [3b+1] = %globaltimer when the flag was seen (0 on timeout),
 *          [3b+2] = rounds run. Latency = seen - (time the flag was set).
 */
#include "sg.h"

SG_DEV void sg_body_clock(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	if (sg_tid() == 0) {
		sg_u64 *o = (sg_u64 *)a.out;
		o[2 * blk] = sg_globaltimer();
		o[2 * blk + 1] = sg_smid();
	}
}
SG_ENTRY(sg_clock, sg_body_clock)

SG_DEV void sg_body_spin(const sg_args &a, sg_i64 blk, sg_state *st)
{
	sg_u64 limit = (sg_u64)a.p[0];
	int work = (int)a.p[1];
	sg_u64 t0 = sg_globaltimer(), seen = 0, rounds = 0;
	float x = (float)sg_tid();
	for (;;) {
		int pf = sg_flag0(st);
		for (int k = 0; k < work; k++)
			x = x * 0.999f + 0.001f;
		if (sg_sync_or(pf)) {
			seen = sg_globaltimer();
			break;
		}
		rounds++;
		if (sg_sync_or(sg_tid() == 0 && sg_globaltimer() - t0 > limit))
			break;
	}
	if (sg_tid() == 0) {
		sg_u64 *o = (sg_u64 *)a.out;
		o[3 * blk] = t0;
		o[3 * blk + 1] = seen;
		o[3 * blk + 2] = rounds;
	}
	if (x == -1.0f) /* never: keeps the work from being optimized away */
		a.out[0] = x;
}
SG_ENTRY(sg_spin, sg_body_spin)
