/*
 * store.c: 8-bit integer tensors stored as bytes (enum sk_store).
 *
 * Integer tensors live in the arena as float32 values unless the compiler
 * stores one as bytes: every kernel that writes it and every kernel that
 * reads it takes bytes (p[SKP_STORE]). These convert between the two
 * forms; the values are integers in [-128, 255], exact in both.
 */
#include "sluice_cpu.h"

#include <string.h>

SK_MV void sk_store_save(const float *src, int code, int64_t n, void *dst)
{
	if (code == SK_STORE_U8) {
		uint8_t *d = (uint8_t *)dst;
		for (int64_t i = 0; i < n; i++)
			d[i] = (uint8_t)(int32_t)src[i];
	} else if (code == SK_STORE_S8) {
		int8_t *d = (int8_t *)dst;
		for (int64_t i = 0; i < n; i++)
			d[i] = (int8_t)(int32_t)src[i];
	} else {
		float *d = (float *)dst;
		for (int64_t i = 0; i < n; i++)
			d[i] = src[i];
	}
}

SK_MV void sk_store_shift(const void *src, int code, int64_t n, float z, float *dst)
{
	if (code == SK_STORE_U8) {
		const uint8_t *s = (const uint8_t *)src;
		for (int64_t i = 0; i < n; i++)
			dst[i] = (float)s[i] - z;
	} else if (code == SK_STORE_S8) {
		const int8_t *s = (const int8_t *)src;
		for (int64_t i = 0; i < n; i++)
			dst[i] = (float)s[i] - z;
	} else {
		const float *s = (const float *)src;
		for (int64_t i = 0; i < n; i++)
			dst[i] = s[i] - z;
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#include "sk512.h"

/* store_requant_512: sk_store_requant 16 values a vector, the tail
 * masked (the compiler's loop leaves up to 63 to scalar code, all of a
 * 7x7 plane): the same steps, rint as round to nearest even. */
__attribute__((target("avx512f"))) static void store_requant_512(const float *src, int64_t n,
								  float s, float z, float lo,
								  float hi, int code, void *dst)
{
	const __m512 vs = _mm512_set1_ps(s), vz = _mm512_set1_ps(z);
	const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 mk = (__mmask16)(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
		__m512 v = sk_requant_512(_mm512_maskz_loadu_ps(mk, src + i), vs, vz, vlo, vhi);
		if (code) {
			/* narrowed in a register, then stored (the narrowing store
			 * to memory, vpmovdb m128, stalls on AMD's Zen 4 and 5) */
			__m128i b = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v));
			if (mk == 0xffff) {
				_mm_storeu_si128((__m128i *)((uint8_t *)dst + i), b);
			} else {
				uint8_t t[16];
				_mm_storeu_si128((__m128i *)t, b);
				memcpy((uint8_t *)dst + i, t, (size_t)(n - i));
			}
		} else
			_mm512_mask_storeu_ps((float *)dst + i, mk, v);
	}
}
#endif

SK_MV void sk_store_requant(const float *src, int64_t n, float s, float z, float lo, float hi,
			    int code, void *dst)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (sk_gemm_isa() == SK_ISA_AVX512) {
		store_requant_512(src, n, s, z, lo, hi, code, dst);
		return;
	}
#endif
	if (code == SK_STORE_U8) {
		uint8_t *d = (uint8_t *)dst;
		for (int64_t i = 0; i < n; i++)
			d[i] = (uint8_t)(int32_t)sk_requant(src[i], s, z, lo, hi);
	} else if (code == SK_STORE_S8) {
		int8_t *d = (int8_t *)dst;
		for (int64_t i = 0; i < n; i++)
			d[i] = (int8_t)(int32_t)sk_requant(src[i], s, z, lo, hi);
	} else {
		float *d = (float *)dst;
		for (int64_t i = 0; i < n; i++)
			d[i] = sk_requant(src[i], s, z, lo, hi);
	}
}
