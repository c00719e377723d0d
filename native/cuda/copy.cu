/*
 * copy.cu: data movement. COPY is a strided copy of rank <= 6 (Transpose,
 * Concat, Slice, Split, Expand are each one or more COPY kernels); GATHER
 * picks slices along an axis by constant indices (ONNX Gather). One thread
 * per output element, SG_EPB elements per block.
 *
 * Parameters (native/cpu/sluice_cpu.h):
 *   COPY    p: 0 rank 1..6 dims 7..12 in strides 13..18 out strides 19
 *           select (in[2][0] != 0 reads in[0], else in[1]).
 *   GATHER  aux = indices (device memory). p: 0 outer 1 axis 2 inner
 *           3 nidx.
 */
#include "sg.h"

SG_DEV void sg_body_copy(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	int rank = (int)a.p[0];
	int n = 1;
#pragma unroll
	for (int d = 0; d < 6; d++)
		if (d < rank)
			n *= (int)a.p[1 + d];
	/* p[19]: in[2] holds one value that picks the source (an If on a
	 * run-time condition) */
	const float *src = a.p[19] && a.in[2][0] == 0.0f ? a.in[1] : a.in[0];
	int i0 = (int)blk * SG_EPB + (int)sg_tid();
#pragma unroll
	for (int k = 0; k < SG_EPB / SG_THREADS; k++) {
		int i = i0 + k * SG_THREADS;
		if (i >= n)
			break;
		int rem = i;
		sg_i64 oi = 0, oo = 0;
#pragma unroll
		for (int d = 5; d >= 0; d--) {
			if (d < rank) {
				int dim = (int)a.p[1 + d];
				int c = rem % dim;
				rem /= dim;
				oi += (sg_i64)c * a.p[7 + d];
				oo += (sg_i64)c * a.p[13 + d];
			}
		}
		a.out[oo] = src[oi];
	}
}
SG_ENTRY(sg_copy, sg_body_copy)

SG_DEV void sg_body_gather(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	int outer = (int)a.p[0], axis = (int)a.p[1], inner = (int)a.p[2];
	int nidx = (int)a.p[3];
	int total = outer * nidx * inner;
	int i0 = (int)blk * SG_EPB + (int)sg_tid();
#pragma unroll
	for (int k = 0; k < SG_EPB / SG_THREADS; k++) {
		int i = i0 + k * SG_THREADS;
		if (i >= total)
			break;
		int c = i % inner, row = i / inner;
		int o = row / nidx, j = row - o * nidx;
		int v = (int)a.aux[j];
		if (v < 0)
			v += axis;
		a.out[i] = a.in[0][((sg_i64)o * axis + v) * inner + c];
	}
}
SG_ENTRY(sg_gather, sg_body_gather)
