/*
 * norm.cu: LayerNormalization over the trailing dimensions (a row per
 * block) and the REDUCE family (ReduceMean/Sum/Max/Min/Prod/SumSquare/L2
 * over one flattened axis).
 *
 * Parameters (native/cpu/sluice_cpu.h):
 *   LAYERNORM in X,scale,bias (nullable). p: 0 rows 1 cols. f: 0 eps.
 *             Grid: rows.
 *   REDUCE    x viewed as [outer][r][inner] gives y[outer][inner].
 *             p: 0 outer 1 r 2 inner 3 mode. t[0]: 0 = an output per
 *             block (grid = outer*inner), 1 = an output per thread
 *             (grid = outer*inner / 256).
 */
#include "sg.h"

/* Polls once per SG_NORM_POLL strides of a block over a row. */
#define SG_NORM_POLL 64

SG_DEV void sg_body_layernorm(const sg_args &a, sg_i64 blk, sg_state *st)
{
	SG_SHARED float red[SG_WARPS];
	int rows = (int)a.p[0], cols = (int)a.p[1];
	int t = (int)sg_tid();
	int r = (int)blk;
	if (r >= rows)
		return;
	const float *x = a.in[0] + (sg_i64)r * cols;
	float *y = a.out + (sg_i64)r * cols;
	const float *sc = a.in[1], *bi = a.in[2];
	float s = 0.0f;
	for (int b = 0, it = 0; b < cols; b += SG_THREADS, it++) {
		if (it % SG_NORM_POLL == SG_NORM_POLL - 1)
			SG_POLL(st);
		if (b + t < cols)
			s += x[b + t];
	}
	float mean = sg_block_sum(s, red) / (float)cols;
	float v = 0.0f;
	for (int j = t; j < cols; j += SG_THREADS) {
		float d = x[j] - mean;
		v += d * d;
	}
	v = sg_block_sum(v, red);
	float rstd = 1.0f / sg_sqrt(v / (float)cols + a.f[0]);
	for (int j = t; j < cols; j += SG_THREADS) {
		float z = (x[j] - mean) * rstd;
		if (sc)
			z *= sc[j];
		if (bi)
			z += bi[j];
		y[j] = z;
	}
}
SG_ENTRY(sg_layernorm, sg_body_layernorm)

/* Reduce codes: enum sk_reduce. */
enum {
	SG_RED_MEAN = 0, SG_RED_SUM = 1, SG_RED_MAX = 2, SG_RED_MIN = 3,
	SG_RED_PROD = 4, SG_RED_SUMSQ = 5, SG_RED_L2 = 6
};

SG_DEV float sg_red_init(int mode)
{
	switch (mode) {
	case SG_RED_MAX:
		return -3.402823466e38f;
	case SG_RED_MIN:
		return 3.402823466e38f;
	case SG_RED_PROD:
		return 1.0f;
	default:
		return 0.0f;
	}
}

SG_DEV float sg_red_step(int mode, float acc, float v)
{
	switch (mode) {
	case SG_RED_MAX:
		return v > acc ? v : acc;
	case SG_RED_MIN:
		return v < acc ? v : acc;
	case SG_RED_PROD:
		return acc * v;
	case SG_RED_SUMSQ:
	case SG_RED_L2:
		return acc + v * v;
	default:
		return acc + v;
	}
}

/* Combines two partial results (squares are already summed). */
SG_DEV float sg_red_join(int mode, float x, float y)
{
	switch (mode) {
	case SG_RED_MAX:
		return y > x ? y : x;
	case SG_RED_MIN:
		return y < x ? y : x;
	case SG_RED_PROD:
		return x * y;
	default:
		return x + y;
	}
}

SG_DEV float sg_red_final(int mode, float acc, int r)
{
	if (mode == SG_RED_MEAN)
		return acc / (float)r;
	if (mode == SG_RED_L2)
		return sg_sqrt(acc);
	return acc;
}

SG_DEV void sg_body_reduce(const sg_args &a, sg_i64 blk, sg_state *st)
{
	SG_SHARED float red[SG_WARPS];
	int outer = (int)a.p[0], r = (int)a.p[1], inner = (int)a.p[2];
	int mode = (int)a.p[3];
	int t = (int)sg_tid();
	if (a.t[0] == 1) {
		int q = (int)blk * SG_THREADS + t;
		if (q >= outer * inner)
			return;
		int o = q / inner, i = q - o * inner;
		const float *x = a.in[0] + (sg_i64)o * r * inner + i;
		float acc = sg_red_init(mode);
		for (int j = 0; j < r; j++)
			acc = sg_red_step(mode, acc, x[(sg_i64)j * inner]);
		a.out[q] = sg_red_final(mode, acc, r);
		return;
	}
	int q = (int)blk;
	if (q >= outer * inner)
		return;
	int o = q / inner, i = q - o * inner;
	const float *x = a.in[0] + (sg_i64)o * r * inner + i;
	float acc = sg_red_init(mode);
	for (int b = 0, it = 0; b < r; b += SG_THREADS, it++) {
		if (it % SG_NORM_POLL == SG_NORM_POLL - 1)
			SG_POLL(st);
		if (b + t < r)
			acc = sg_red_step(mode, acc, x[(sg_i64)(b + t) * inner]);
	}
	/* block-wide join through shared memory: warp shuffles first */
	for (int off = 16; off > 0; off >>= 1)
		acc = sg_red_join(mode, acc, sg_shfl_xor(acc, off));
	if ((t & 31) == 0)
		red[t >> 5] = acc;
	sg_sync();
	if (t == 0) {
		float v = red[0];
		for (int w = 1; w < SG_WARPS; w++)
			v = sg_red_join(mode, v, red[w]);
		a.out[q] = sg_red_final(mode, v, r);
	}
}
SG_ENTRY(sg_reduce, sg_body_reduce)
