/*
 * eltwise.cu: elementwise kernels. UNARY (every activation code: ReLU,
 * Clip, Sigmoid, HardSigmoid, HardSwish, GELU, ...), broadcasting BINARY
 * of rank <= 6 (Add, Mul, Sub, Div, Pow, Max, Min, PRelu) and CHAFFINE,
 * the per-channel affine of a standalone BatchNormalization. A block is
 * SG_EPB consecutive output elements (4 per thread, strided by the block
 * size so that each load instruction is coalesced).
 *
 * Parameters (native/cpu/sluice_cpu.h):
 *   UNARY    p: 0 n. act p[31], f[6], f[7].
 *   BINARY   in A,B. p: 0 binop 1 rank 2..7 out dims 8..13 A strides
 *            14..19 B strides (0 where broadcast). act p[31].
 *            t[0] = 1: A, B and the output share one contiguous layout.
 *   CHAFFINE in X,scale,shift. p: 0 N 1 C 2 inner. act p[31].
 */
#include "sg.h"

SG_DEV void sg_body_unary(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	int n = (int)a.p[0];
	int act = (int)a.p[SGP_ACT];
	float fa = a.f[SGF_ACT_A], fb = a.f[SGF_ACT_B];
	int i0 = (int)blk * SG_EPB + (int)sg_tid();
#pragma unroll
	for (int k = 0; k < SG_EPB / SG_THREADS; k++) {
		int i = i0 + k * SG_THREADS;
		if (i < n)
			a.out[i] = sg_act_fast(a.in[0][i], act, fa, fb);
	}
}
SG_ENTRY(sg_unary, sg_body_unary)

/* Binary codes: enum sk_binop. */
enum {
	SG_BIN_ADD = 0, SG_BIN_SUB = 1, SG_BIN_MUL = 2, SG_BIN_DIV = 3,
	SG_BIN_POW = 4, SG_BIN_MAX = 5, SG_BIN_MIN = 6, SG_BIN_PRELU = 7,
	SG_BIN_GREATER = 8, SG_BIN_LESS = 9, SG_BIN_EQUAL = 10,
	SG_BIN_GREATER_EQ = 11, SG_BIN_LESS_EQ = 12, SG_BIN_MOD = 13
};

SG_DEV float sg_binop(int op, float x, float z)
{
	switch (op) {
	case SG_BIN_SUB:
		return x - z;
	case SG_BIN_MUL:
		return x * z;
	case SG_BIN_DIV:
		return x / z;
	case SG_BIN_POW:
		return sg_powf(x, z);
	case SG_BIN_MAX:
		return x > z ? x : z;
	case SG_BIN_MIN:
		return x < z ? x : z;
	case SG_BIN_PRELU:
		return x < 0 ? x * z : x;
	case SG_BIN_GREATER:
		return x > z ? 1.0f : 0.0f;
	case SG_BIN_LESS:
		return x < z ? 1.0f : 0.0f;
	case SG_BIN_EQUAL:
		return x == z ? 1.0f : 0.0f;
	case SG_BIN_GREATER_EQ:
		return x >= z ? 1.0f : 0.0f;
	case SG_BIN_LESS_EQ:
		return x <= z ? 1.0f : 0.0f;
	case SG_BIN_MOD:
		return sg_fmodf(x, z);
	default:
		return x + z;
	}
}

SG_DEV void sg_body_binary(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	int op = (int)a.p[0], rank = (int)a.p[1];
	int act = (int)a.p[SGP_ACT];
	float fa = a.f[SGF_ACT_A], fb = a.f[SGF_ACT_B];
	int n = 1;
#pragma unroll
	for (int d = 0; d < 6; d++)
		if (d < rank)
			n *= (int)a.p[2 + d];
	int i0 = (int)blk * SG_EPB + (int)sg_tid();
	const float *A = a.in[0], *B = a.in[1];
#pragma unroll
	for (int k = 0; k < SG_EPB / SG_THREADS; k++) {
		int i = i0 + k * SG_THREADS;
		if (i >= n)
			break;
		sg_i64 oa = i, ob = i;
		if (a.t[0] != 1) {
			/* coordinates of i, last dimension first */
			int rem = i;
			oa = 0;
			ob = 0;
#pragma unroll
			for (int d = 5; d >= 0; d--) {
				if (d < rank) {
					int dim = (int)a.p[2 + d];
					int c = rem % dim;
					rem /= dim;
					oa += (sg_i64)c * a.p[8 + d];
					ob += (sg_i64)c * a.p[14 + d];
				}
			}
		}
		a.out[i] = sg_act_fast(sg_binop(op, A[oa], B[ob]), act, fa, fb);
	}
}
SG_ENTRY(sg_binary, sg_body_binary)

SG_DEV void sg_body_chaffine(const sg_args &a, sg_i64 blk, sg_state *st)
{
	(void)st;
	int C = (int)a.p[1], inner = (int)a.p[2];
	int n = (int)a.p[0] * C * inner;
	int act = (int)a.p[SGP_ACT];
	float fa = a.f[SGF_ACT_A], fb = a.f[SGF_ACT_B];
	int i0 = (int)blk * SG_EPB + (int)sg_tid();
#pragma unroll
	for (int k = 0; k < SG_EPB / SG_THREADS; k++) {
		int i = i0 + k * SG_THREADS;
		if (i < n) {
			int c = (i / inner) % C;
			float y = a.in[0][i] * a.in[1][c] + a.in[2][c];
			a.out[i] = sg_act_fast(y, act, fa, fb);
		}
	}
}
SG_ENTRY(sg_chaffine, sg_body_chaffine)
