/*
 * act.c: activations and the fused GEMM/conv epilogue (bias, residual,
 * activation) shared by every kernel family.
 */
#include "sluice_cpu.h"
#include "skmath.h"

#include <math.h>
#include <string.h>

/* sk_round_f16 rounds x to the nearest float16 value (ties to even), kept
 * as a float: ONNX's Cast to FLOAT16 in an engine that computes in
 * float32. Overflow gives an infinity, NaN stays NaN. */
static float sk_round_f16(float x)
{
	uint32_t u, a;
	memcpy(&u, &x, 4);
	a = u & 0x7fffffffu;
	if (a >= 0x7f800000u) /* inf, NaN */
		return x;
	if (a >= 0x477ff000u) /* 65520 and up round past 65504 */
		return (u >> 31) ? -INFINITY : INFINITY;
	if (a < 0x38800000u) /* below 2^-14: float16 subnormals, steps of 2^-24 */
		return nearbyintf(x * 16777216.0f) * 5.9604644775390625e-8f;
	u += 0xfffu + ((u >> 13) & 1u); /* 10 of 23 mantissa bits, to even */
	u &= ~0x1fffu;
	memcpy(&x, &u, 4);
	return x;
}

float sk_act1(float x, int act, float a, float b)
{
	switch (act) {
	case SK_ACT_NONE:
	case SK_ACT_IDENTITY:
		return x;
	case SK_ACT_RELU:
		return x > 0 ? x : 0;
	case SK_ACT_CLIP:
		return x < a ? a : (x > b ? b : x);
	case SK_ACT_SIGMOID:
		return sk_sigmoidf(x);
	case SK_ACT_HARDSIGMOID: {
		float y = a * x + b;
		return y < 0 ? 0 : (y > 1 ? 1 : y);
	}
	case SK_ACT_HARDSWISH: {
		float y = x * (1.0f / 6.0f) + 0.5f;
		return x * (y < 0 ? 0 : (y > 1 ? 1 : y));
	}
	case SK_ACT_TANH:
		return sk_tanhf(x);
	case SK_ACT_GELU:
		return 0.5f * x * (1.0f + sk_erff(x * 0.70710678118654752f));
	case SK_ACT_GELU_TANH:
		return 0.5f * x * (1.0f + sk_tanhf(0.79788456080286536f *
						   (x + 0.044715f * x * x * x)));
	case SK_ACT_LEAKYRELU:
		return x >= 0 ? x : a * x;
	case SK_ACT_EXP:
		return sk_expf(x);
	case SK_ACT_LOG:
		return logf(x);
	case SK_ACT_NEG:
		return -x;
	case SK_ACT_ABS:
		return fabsf(x);
	case SK_ACT_SQRT:
		return sqrtf(x);
	case SK_ACT_RECIP:
		return 1.0f / x;
	case SK_ACT_ERF:
		return sk_erff(x);
	case SK_ACT_FLOOR:
		return floorf(x);
	case SK_ACT_CEIL:
		return ceilf(x);
	case SK_ACT_POWC:
		if (a == 2.0f)
			return x * x;
		if (a == 0.5f)
			return sqrtf(x);
		if (a == 1.0f)
			return x;
		if (a == 3.0f)
			return x * x * x;
		return powf(x, a);
	case SK_ACT_AFFINE:
		return a * x + b;
	case SK_ACT_SOFTPLUS:
		return x > 20.0f ? x : log1pf(sk_expf(x));
	case SK_ACT_ELU:
		return x >= 0 ? x : a * (sk_expf(x) - 1.0f);
	case SK_ACT_ROUND:
		return nearbyintf(x);
	case SK_ACT_SIN:
		return sinf(x);
	case SK_ACT_COS:
		return cosf(x);
	case SK_ACT_F16:
		return sk_round_f16(x);
	case SK_ACT_SINH:
		return sinhf(x);
	case SK_ACT_ASINH:
		return asinhf(x);
	case SK_ACT_ATANH:
		return atanhf(x);
	case SK_ACT_ASIN:
		return asinf(x);
	case SK_ACT_ACOS:
		return acosf(x);
	case SK_ACT_ATAN:
		return atanf(x);
	case SK_ACT_SIGN:
		return x > 0 ? 1.0f : (x < 0 ? -1.0f : x); /* 0, -0 and NaN as they are */
	case SK_ACT_THRESHRELU:
		return x > a ? x : 0.0f;
	case SK_ACT_SHRINK:
		return x < -a ? x + b : (x > a ? x - b : 0.0f);
	}
	return x;
}

/* Each case is its own loop so the common ones vectorize. */
SK_MV void sk_act_apply(float *x, int64_t n, int act, float a, float b)
{
	int64_t i;
	switch (act) {
	case SK_ACT_NONE:
	case SK_ACT_IDENTITY:
		return;
	case SK_ACT_RELU:
		for (i = 0; i < n; i++)
			x[i] = x[i] > 0 ? x[i] : 0;
		return;
	case SK_ACT_CLIP:
		for (i = 0; i < n; i++) {
			float v = x[i];
			v = v < a ? a : v;
			x[i] = v > b ? b : v;
		}
		return;
	case SK_ACT_SIGMOID:
		for (i = 0; i < n; i++)
			x[i] = sk_sigmoidf(x[i]);
		return;
	case SK_ACT_HARDSIGMOID:
		for (i = 0; i < n; i++) {
			float y = a * x[i] + b;
			y = y < 0 ? 0 : y;
			x[i] = y > 1 ? 1 : y;
		}
		return;
	case SK_ACT_HARDSWISH:
		for (i = 0; i < n; i++) {
			float y = x[i] * (1.0f / 6.0f) + 0.5f;
			y = y < 0 ? 0 : y;
			y = y > 1 ? 1 : y;
			x[i] = x[i] * y;
		}
		return;
	case SK_ACT_TANH:
		for (i = 0; i < n; i++)
			x[i] = sk_tanhf(x[i]);
		return;
	case SK_ACT_GELU:
		for (i = 0; i < n; i++)
			x[i] = 0.5f * x[i] * (1.0f + sk_erff(x[i] * 0.70710678118654752f));
		return;
	case SK_ACT_GELU_TANH:
		for (i = 0; i < n; i++) {
			float v = x[i];
			x[i] = 0.5f * v * (1.0f + sk_tanhf(0.79788456080286536f *
							   (v + 0.044715f * v * v * v)));
		}
		return;
	case SK_ACT_LEAKYRELU:
		for (i = 0; i < n; i++)
			x[i] = x[i] >= 0 ? x[i] : a * x[i];
		return;
	case SK_ACT_EXP:
		for (i = 0; i < n; i++)
			x[i] = sk_expf(x[i]);
		return;
	case SK_ACT_NEG:
		for (i = 0; i < n; i++)
			x[i] = -x[i];
		return;
	case SK_ACT_ABS:
		for (i = 0; i < n; i++)
			x[i] = fabsf(x[i]);
		return;
	case SK_ACT_SQRT:
		for (i = 0; i < n; i++)
			x[i] = sqrtf(x[i]);
		return;
	case SK_ACT_RECIP:
		for (i = 0; i < n; i++)
			x[i] = 1.0f / x[i];
		return;
	case SK_ACT_ERF:
		for (i = 0; i < n; i++)
			x[i] = sk_erff(x[i]);
		return;
	case SK_ACT_AFFINE:
		for (i = 0; i < n; i++)
			x[i] = a * x[i] + b;
		return;
	default:
		for (i = 0; i < n; i++)
			x[i] = sk_act1(x[i], act, a, b);
		return;
	}
}

SK_MV void sk_epilogue(float *y, int64_t rows, int64_t cols, int64_t ldy,
		       const float *bias_row, const float *bias_col,
		       const float *res, int64_t ldr, int act, float a, float b)
{
	for (int64_t r = 0; r < rows; r++) {
		float *yr = y + r * ldy;
		if (bias_row) {
			float bv = bias_row[r];
			for (int64_t c = 0; c < cols; c++)
				yr[c] += bv;
		}
		if (bias_col)
			for (int64_t c = 0; c < cols; c++)
				yr[c] += bias_col[c];
		if (res) {
			const float *rr = res + r * ldr;
			for (int64_t c = 0; c < cols; c++)
				yr[c] += rr[c];
		}
		if (act != SK_ACT_NONE)
			sk_act_apply(yr, cols, act, a, b);
	}
}
