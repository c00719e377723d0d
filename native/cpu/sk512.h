/*
 * sk512.h: small AVX-512 steps that several kernel files share. Private
 * to the kernel files (the Go side includes sluice_cpu.h only).
 */
#ifndef SK_512_H
#define SK_512_H

#include <stdint.h>

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
#endif

#endif
