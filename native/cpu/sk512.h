/*
 * sk512.h: small AVX-512 steps that several kernel files share. Private
 * to the kernel files (the Go side includes sluice_cpu.h only).
 */
#ifndef SK_512_H
#define SK_512_H

#include <stdint.h>

#include "sluice_cpu.h" /* SK_ACT_* */

/* sk_bytes64 is the mask of bytes b (of 64) with 0 <= a + b < n: the
 * bytes of a 64-byte vector at offset a that lie inside [0, n). */
static inline uint64_t sk_bytes64(int64_t a, int64_t n)
{
	int64_t lo = a < 0 ? -a : 0, hi = n - a < 64 ? n - a : 64;
	if (hi <= lo)
		return 0;
	uint64_t up = hi == 64 ? ~0ull : (1ull << hi) - 1;
	return up & ~((1ull << lo) - 1);
}

/* sk_lanes16 is the mask of lanes l (of 16) with 0 <= a + l < n: the
 * floats of a 16-float vector at offset a that lie inside [0, n). */
static inline uint16_t sk_lanes16(int64_t a, int64_t n)
{
	int64_t lo = a < 0 ? -a : 0, hi = n - a < 16 ? n - a : 16;
	if (hi <= lo)
		return 0;
	return (uint16_t)(((1u << hi) - 1) & ~((1u << lo) - 1));
}

/* sk_act_512_has reports whether sk_act_512 applies activation act (the
 * ones gemm_epi_1 fuses): none, ReLU or Clip. */
static inline int sk_act_512_has(int act)
{
	return act == SK_ACT_NONE || act == SK_ACT_RELU || act == SK_ACT_CLIP;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* sk_requant_512 is QUANT's mode 4 (sk_requant) on 16 values:
 * clamp(rint(v * s) + z, lo, hi), rint rounding to nearest even, the
 * clamp's comparisons ordered (a NaN stays one). */
__attribute__((target("avx512f"))) static inline __m512 sk_requant_512(__m512 v, __m512 s, __m512 z,
									__m512 lo, __m512 hi)
{
	v = _mm512_mul_ps(v, s);
	v = _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
	v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), hi);
	return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), lo);
}

/* sk_transpose16 transposes 16 vectors of 16 floats: r[i][j] becomes r[j][i],
 * each stage in place (at most 20 vectors live). A caller that indexes r
 * only in loops of a constant trip count keeps it in registers: a loop
 * to a run-time bound (the pixels or channels left) made the compiler
 * keep r in memory, 49 spilled stores in dw3x3_cvec_512 against 3. */
__attribute__((target("avx512f"))) static inline void sk_transpose16(__m512 r[16])
{
	for (int i = 0; i < 8; i++) {
		__m512 a = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		__m512 b = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
		r[2 * i] = a;
		r[2 * i + 1] = b;
	}
	/* r[4g + m], 128-bit lane L: column 4L + m of rows 4g..4g+3 */
	for (int g = 0; g < 4; g++) {
		__m512d a = _mm512_castps_pd(r[4 * g]), b = _mm512_castps_pd(r[4 * g + 1]);
		__m512d c = _mm512_castps_pd(r[4 * g + 2]), d = _mm512_castps_pd(r[4 * g + 3]);
		r[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
		r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
		r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
		r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
	}
	for (int m = 0; m < 4; m++) {
		__m512 vlo = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88);
		__m512 vhi = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xdd);
		__m512 wlo = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88);
		__m512 whi = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xdd);
		r[m] = _mm512_shuffle_f32x4(vlo, wlo, 0x88);
		r[8 + m] = _mm512_shuffle_f32x4(vlo, wlo, 0xdd);
		r[4 + m] = _mm512_shuffle_f32x4(vhi, whi, 0x88);
		r[12 + m] = _mm512_shuffle_f32x4(vhi, whi, 0xdd);
	}
}

/* sk_act_512 is the activations gemm_epi_1 applies, on 16 values: ReLU
 * (v > 0 ? v : 0) or Clip (v < lo ? lo : (v > hi ? hi : v)), the
 * comparisons ordered (a NaN: 0 for ReLU, kept by Clip); others as is */
__attribute__((target("avx512f"))) static inline __m512 sk_act_512(__m512 v, int act, __m512 lo,
								  __m512 hi)
{
	if (act == SK_ACT_RELU)
		return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v);
	if (act == SK_ACT_CLIP) {
		__mmask16 below = _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ);
		v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), hi);
		return _mm512_mask_mov_ps(v, below, lo);
	}
	return v;
}
#endif

#endif
