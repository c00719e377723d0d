/*
 * store.c: 8-bit integer tensors stored as bytes (enum sk_store).
 *
 * Integer tensors live in the arena as float32 values unless the compiler
 * stores one as bytes: every kernel that writes it and every kernel that
 * reads it takes bytes (p[SKP_STORE]). These convert between the two
 * forms; the values are integers in [-128, 255], exact in both.
 */
#include "sluice_cpu.h"

SK_MV void sk_store_load(const void *src, int code, int64_t n, float *dst)
{
	if (code == SK_STORE_U8) {
		const uint8_t *s = (const uint8_t *)src;
		for (int64_t i = 0; i < n; i++)
			dst[i] = (float)s[i];
	} else if (code == SK_STORE_S8) {
		const int8_t *s = (const int8_t *)src;
		for (int64_t i = 0; i < n; i++)
			dst[i] = (float)s[i];
	} else {
		const float *s = (const float *)src;
		for (int64_t i = 0; i < n; i++)
			dst[i] = s[i];
	}
}

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
