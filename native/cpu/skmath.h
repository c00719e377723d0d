/*
 * skmath.h: branch-free float approximations that vectorize (libm's expf,
 * erff and tanhf are scalar calls). Private to the kernel files.
 * Accuracy: sk_expf ~2 ulp, sk_erff ~1.2e-7 relative, sk_tanhf ~3e-7
 * absolute; see the kernel tests.
 */
#ifndef SK_MATH_H
#define SK_MATH_H

#include <stdint.h>
#include <string.h>

static inline float sk_bits2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* sk_expf: exp(x) by range reduction to [-ln2/2, ln2/2] and a degree-6
 * polynomial; saturates to 0 / FLT_MAX-ish outside [-87.3, 88.7]. */
static inline float sk_expf(float x)
{
	x = x < -87.3f ? -87.3f : x;
	x = x > 88.7f ? 88.7f : x;
	float t = x * 1.44269504088896341f;
	/* round to nearest via the magic-number trick (vectorizes anywhere) */
	float fi = (t + 12582912.0f) - 12582912.0f;
	float r = x - fi * 0.693359375f;
	r = r - fi * -2.12194440e-4f;
	float p = 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r * r + r + 1.0f;
	int32_t e = (int32_t)fi + 127;
	return p * sk_bits2f((uint32_t)e << 23);
}

/* sk_erff: erf(x) from Numerical Recipes' erfc Chebyshev fit (relative error
 * below 1.2e-7). */
static inline float sk_erff(float x)
{
	float z = x < 0 ? -x : x;
	float t = 1.0f / (1.0f + 0.5f * z);
	float p = 0.17087277f;
	p = p * t - 0.82215223f;
	p = p * t + 1.48851587f;
	p = p * t - 1.13520398f;
	p = p * t + 0.27886807f;
	p = p * t - 0.18628806f;
	p = p * t + 0.09678418f;
	p = p * t + 0.37409196f;
	p = p * t + 1.00002368f;
	p = p * t - 1.26551223f;
	float erfc = t * sk_expf(-z * z + p);
	float r = 1.0f - erfc;
	return x < 0 ? -r : r;
}

/* sk_tanhf: tanh(x): odd polynomial near 0, 1 - 2/(e^2|x| + 1) beyond. */
static inline float sk_tanhf(float x)
{
	float z = x < 0 ? -x : x;
	float z2 = z * z;
	float small = z + z * z2 * (-0.333333333f + z2 * (0.133333333f +
			 z2 * (-0.0539682540f + z2 * (0.0218694885f +
			 z2 * -0.00886323552f))));
	float big = 1.0f - 2.0f / (sk_expf(2.0f * z) + 1.0f);
	float r = z < 0.4f ? small : big;
	return x < 0 ? -r : r;
}

static inline float sk_sigmoidf(float x)
{
	return 1.0f / (1.0f + sk_expf(-x));
}

/* Sums in a fixed order, whatever the instruction set: SK_SUM_LANES
 * running sums (element i goes to sum i % SK_SUM_LANES), then the sums
 * added pairwise (lane j + lane j + 8, then + 4, + 2, + 1). Every SK_MV
 * clone computes each lane alike (one 16-float vector, two of 8 or four of
 * 4), so the bits are the same on every CPU, and the sum no longer waits
 * on each addition in turn. */
#define SK_SUM_LANES 16

static inline float sk_sum_fold(float *a)
{
	for (int w = SK_SUM_LANES / 2; w > 0; w /= 2)
		for (int j = 0; j < w; j++)
			a[j] += a[j + w];
	return a[0];
}

/* sk_sum_lanes: x[0] + ... + x[n-1] in `lanes` running sums (a constant
 * power of two, at most 64; element i in sum i % lanes), then added
 * pairwise. */
static inline float sk_sum_lanes(const float *x, int64_t n, int lanes)
{
	float a[64] = {0};
	int64_t i = 0;
	for (; i + lanes <= n; i += lanes)
		for (int j = 0; j < lanes; j++)
			a[j] += x[i + j];
	for (int j = 0; i + j < n; j++)
		a[j] += x[i + j];
	for (int w = lanes / 2; w > 0; w /= 2)
		for (int j = 0; j < w; j++)
			a[j] += a[j + w];
	return a[0];
}

/* sk_sum: x[0] + ... + x[n-1] in SK_SUM_LANES lanes. */
static inline float sk_sum(const float *x, int64_t n) { return sk_sum_lanes(x, n, SK_SUM_LANES); }

/* sk_sum_sqdev: the sum of (x[i] - m)^2 in lanes. */
static inline float sk_sum_sqdev(const float *x, int64_t n, float m)
{
	float a[SK_SUM_LANES] = {0};
	int64_t i = 0;
	for (; i + SK_SUM_LANES <= n; i += SK_SUM_LANES)
		for (int j = 0; j < SK_SUM_LANES; j++) {
			float d = x[i + j] - m;
			a[j] += d * d;
		}
	for (int j = 0; i + j < n; j++) {
		float d = x[i + j] - m;
		a[j] += d * d;
	}
	return sk_sum_fold(a);
}

/* sk_max: the largest of x[0..n), n >= 1, in lanes (each starting at
 * x[0]); a NaN is passed over as the comparison x > m passes it. */
static inline float sk_max(const float *x, int64_t n)
{
	float a[SK_SUM_LANES];
	for (int j = 0; j < SK_SUM_LANES; j++)
		a[j] = x[0];
	int64_t i = 0;
	for (; i + SK_SUM_LANES <= n; i += SK_SUM_LANES)
		for (int j = 0; j < SK_SUM_LANES; j++)
			a[j] = x[i + j] > a[j] ? x[i + j] : a[j];
	for (int j = 0; i + j < n; j++)
		a[j] = x[i + j] > a[j] ? x[i + j] : a[j];
	for (int w = SK_SUM_LANES / 2; w > 0; w /= 2)
		for (int j = 0; j < w; j++)
			a[j] = a[j + w] > a[j] ? a[j + w] : a[j];
	return a[0];
}

#endif /* SK_MATH_H */
