/*
 * softmax.cu: Softmax and LogSoftmax over one axis of x viewed as
 * [outer][n][inner].
 *
 * Parameters: p: 0 outer 1 n 2 inner 3 log.
 * t[0]: 0 = a row per block (rows (o, i) reduce over n with stride inner;
 *       grid = outer * inner), the choice for inner == 1;
 *       1 = a row per thread (threads of a block take consecutive i, so
 *       the strided rows are read coalesced; grid = outer*inner / 256).
 */
#include "sg.h"

/* Polls once per SG_SOFTMAX_POLL strides of a block over a row. */
#define SG_SOFTMAX_POLL 64

SG_DEV void sg_body_softmax(const sg_args &a, sg_i64 blk, sg_state *st)
{
	SG_SHARED float red[SG_WARPS];
	int outer = (int)a.p[0], n = (int)a.p[1], inner = (int)a.p[2];
	int lg = (int)a.p[3];
	int t = (int)sg_tid();
	if (a.t[0] == 1) {
		int r = (int)blk * SG_THREADS + t;
		if (r >= outer * inner)
			return;
		int o = r / inner, i = r - o * inner;
		const float *x = a.in[0] + (sg_i64)o * n * inner + i;
		float *y = a.out + (sg_i64)o * n * inner + i;
		float m = x[0];
		for (int j = 1; j < n; j++)
			m = x[(sg_i64)j * inner] > m ? x[(sg_i64)j * inner] : m;
		float s = 0.0f;
		for (int j = 0; j < n; j++)
			s += sg_expf(x[(sg_i64)j * inner] - m);
		if (lg) {
			float ls = sg_logf(s);
			for (int j = 0; j < n; j++)
				y[(sg_i64)j * inner] = x[(sg_i64)j * inner] - m - ls;
		} else {
			float rs = 1.0f / s;
			for (int j = 0; j < n; j++)
				y[(sg_i64)j * inner] = sg_expf(x[(sg_i64)j * inner] - m) * rs;
		}
		return;
	}
	int r = (int)blk;
	if (r >= outer * inner)
		return;
	int o = r / inner, i = r - o * inner;
	const float *x = a.in[0] + (sg_i64)o * n * inner + i;
	float *y = a.out + (sg_i64)o * n * inner + i;
	float m = -3.402823466e38f;
	for (int b = 0, it = 0; b < n; b += SG_THREADS, it++) {
		if (it % SG_SOFTMAX_POLL == SG_SOFTMAX_POLL - 1)
			SG_POLL(st);
		int j = b + t;
		if (j < n)
			m = x[(sg_i64)j * inner] > m ? x[(sg_i64)j * inner] : m;
	}
	m = sg_block_max(m, red);
	float s = 0.0f;
	for (int j = t; j < n; j += SG_THREADS)
		s += sg_expf(x[(sg_i64)j * inner] - m);
	s = sg_block_sum(s, red);
	SG_POLL(st);
	if (lg) {
		float ls = sg_logf(s);
		for (int j = t; j < n; j += SG_THREADS)
			y[(sg_i64)j * inner] = x[(sg_i64)j * inner] - m - ls;
	} else {
		float rs = 1.0f / s;
		for (int j = t; j < n; j += SG_THREADS)
			y[(sg_i64)j * inner] = sg_expf(x[(sg_i64)j * inner] - m) * rs;
	}
}
SG_ENTRY(sg_softmax, sg_body_softmax)
