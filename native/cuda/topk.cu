/*
 * topk.cu: ONNX TopK along one axis: the k largest (or smallest) values
 * of each row, best first, ties to the lower index; p[5] = 1 writes the
 * indices (as float32) instead of the values. One thread per input
 * element: it counts the row's elements that rank before it and, when
 * fewer than k do, writes itself at that rank (ranks are distinct, so no
 * two threads write one place). The order of native/cpu/topk.c.
 *
 * Parameters: p: 0 outer 1 n 2 inner 3 k 4 largest 5 indices.
 */
#include "sg.h"

SG_DEV int sg_topk_before(float a, int ia, float b, int ib, int largest)
{
	if (a != b)
		return largest ? a > b : a < b;
	return ia < ib;
}

SG_DEV void sg_body_topk(const sg_args &a, sg_i64 blk, sg_state *st)
{
	int outer = (int)a.p[0], n = (int)a.p[1], inner = (int)a.p[2], K = (int)a.p[3];
	int largest = (int)a.p[4], indices = (int)a.p[5];
	int total = outer * n * inner;
	int i0 = (int)blk * SG_EPB + (int)sg_tid();
	for (int e = 0; e < SG_EPB / SG_THREADS; e++) {
		/* every thread polls here, the block's only sync point */
		if (e > 0)
			SG_POLL(st);
		int idx = i0 + e * SG_THREADS;
		if (idx >= total)
			continue;
		int i = idx % inner, q = idx / inner;
		int j = q % n, o = q / n;
		const float *x = a.in[0] + (sg_i64)o * n * inner + i;
		float v = x[(sg_i64)j * inner];
		int rank = 0;
		for (int m = 0; m < n && rank < K; m++)
			rank += sg_topk_before(x[(sg_i64)m * inner], m, v, j, largest);
		if (rank < K)
			a.out[((sg_i64)o * K + rank) * inner + i] = indices ? (float)j : v;
	}
}
SG_ENTRY(sg_topk, sg_body_topk)
