/*
 * quant.c: the int8 kernels (ONNX quantisation operators).
 *
 * Integer tensors (uint8, int8, int32) live in the arena as float32 holding
 * their integer values: every uint8 / int8 value is exact, and an int32
 * value is rounded to the nearest float32 exactly as ONNX's Cast to float
 * rounds it (it is consumed that way: MatMulInteger's result is cast before
 * it is scaled).
 *
 *   QUANT  elementwise quantise / dequantise (per tensor or per axis), and
 *          the two reductions of DynamicQuantizeLinear (scale, zero point);
 *   QGEMM  batched Y = sum_k (A[m,k] - za) (B[k,n] - zb) over integer
 *          operands, with exact int32 accumulation: AMX tiles, AVX-512
 *          VNNI (vpdpbusd), AVX2 (vpmaddwd) or portable C, as the CPU
 *          allows (enum sk_qgemm_kernel); all give the same bits (integer
 *          sums). Y is the int32 sum as float, or requantised:
 *          clamp(rint(float(acc + bias) * mult) + zy).
 *
 * Params: see sluice_cpu.h.
 */
#include "sluice_cpu.h"

#include "sk512.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* ---- QUANT --------------------------------------------------------------- */

#define QUANT_CHUNK 16384

void sk_prep_quant(sk_kernel *k, int units)
{
	const int64_t *p = k->p;
	if (p[0] < 1 || p[1] < 1 || p[2] < 1 || p[3] < SK_QUANT_QUANTIZE || p[3] > SK_QUANT_ADD || p[4] > p[5] ||
	    (p[3] == SK_QUANT_ADD && (p[1] != 1 || !k->in[3] || !k->in[4] || !k->in[6]))) {
		k->grid = -1;
		return;
	}
	/* bytes only where the mode reads or writes 8-bit integers: the
	 * output of modes 0, 4 and 5 (within 8 bits), input 0 of modes 1
	 * and 5, mode 5's in[3] */
	int mode = (int)p[3];
	unsigned ops = (mode == SK_QUANT_DEQUANTIZE || mode == SK_QUANT_ADD ? 1u << 1 : 0) |
		       (mode == SK_QUANT_ADD ? 1u << 4 : 0) |
		       ((mode == SK_QUANT_QUANTIZE || mode == SK_QUANT_REQUANT || mode == SK_QUANT_ADD) &&
				p[4] >= -128 && p[5] <= 255
			? 1u
			: 0);
	if (!sk_store_ok(p[SKP_STORE], ops)) {
		k->grid = -1;
		return;
	}
	if (p[3] == SK_QUANT_DYN_SCALE || p[3] == SK_QUANT_DYN_ZERO) {
		k->grid = 1; /* one reduction over the whole tensor */
		return;
	}
	int64_t want = SK_MAX(SK_MIN((int64_t)units * 4, p[0] / QUANT_CHUNK), 1);
	k->t[0] = SK_CDIV(sk_split(p[0], want, 1), 16) * 16;
	k->grid = SK_CDIV(p[0], k->t[0]);
}

static inline float q_clamp(float v, float lo, float hi)
{
	return v < lo ? lo : (v > hi ? hi : v);
}

/* q_run applies an elementwise QUANT mode with one scale and zero point
 * to n values (built for AVX2 too: rintf becomes one instruction). */
SK_MV static void q_run(const float *x, float *y, int64_t n, int mode, float s, float z,
			float lo, float hi)
{
	if (mode == SK_QUANT_DEQUANTIZE) {
		for (int64_t j = 0; j < n; j++)
			y[j] = (x[j] - z) * s;
	} else if (mode == SK_QUANT_REQUANT) {
		for (int64_t j = 0; j < n; j++)
			y[j] = sk_requant(x[j], s, z, lo, hi);
	} else if (s == 0.0f) {
		for (int64_t j = 0; j < n; j++)
			y[j] = q_clamp(z, lo, hi);
	} else {
		for (int64_t j = 0; j < n; j++)
			y[j] = q_clamp(rintf(x[j] / s) + z, lo, hi);
	}
}

/* q_add is QUANT's mode 5 over n values: each the chain its
 * DequantizeLinear (mode 1) of a and of b, their sum, the sum's
 * activation (the Add's, as BINARY applies it) and its QuantizeLinear
 * (mode 0, q_run's) compute apart. */
SK_MV static void q_add(const float *a, const float *b, float *y, int64_t n, float sa, float za,
		  float sb, float zb, float s, float z, float lo, float hi, int act, float fa, float fb)
{
	for (int64_t j = 0; j < n; j++)
		y[j] = (a[j] - za) * sa + (b[j] - zb) * sb;
	if (act)
		sk_act_apply(y, n, act, fa, fb);
	q_run(y, y, n, SK_QUANT_QUANTIZE, s, z, lo, hi);
}

/* dyn_minmax is min(0, min x) and max(0, max x) (DynamicQuantizeLinear). */
static void dyn_minmax(const float *x, int64_t n, float *lo, float *hi)
{
	float a = 0.0f, b = 0.0f;
	for (int64_t i = 0; i < n; i++) {
		a = x[i] < a ? x[i] : a;
		b = x[i] > b ? x[i] : b;
	}
	*lo = a;
	*hi = b;
}

/* q_stored runs QUANT's elementwise modes over [i0, i1) where an operand
 * is stored as bytes: chunks are converted to float32, computed by the
 * same routines as the float path (the same bits) and stored back. */
#define QUANT_STORED_CHUNK 1024
static void q_stored(const sk_kernel *k, int64_t i0, int64_t i1, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t C = p[1], inner = p[2];
	float lo = (float)p[4], hi = (float)p[5];
	int sx = sk_store_in(k, 0), sb = sk_store_in(k, 3), sy = sk_store_out(k);
	const float *sc = k->in[1], *zp = k->in[2];
	float xa[QUANT_STORED_CHUNK], xb[QUANT_STORED_CHUNK], y[QUANT_STORED_CHUNK];
	for (int64_t i = i0; i < i1; i += QUANT_STORED_CHUNK) {
		SK_POLL(ctx);
		int64_t e = SK_MIN(i + QUANT_STORED_CHUNK, i1), m = e - i;
		/* float operands are read in place */
		const float *a = sx ? xa : k->in[0] + i, *b = sb ? xb : (k->in[3] ? k->in[3] + i : NULL);
		if (sx)
			sk_store_load(sk_elem(k->in[0], sx, i), sx, m, xa);
		if (p[3] == SK_QUANT_ADD) {
			if (sb)
				sk_store_load(sk_elem(k->in[3], sb, i), sb, m, xb);
			q_add(a, b, y, m, k->in[4][0], k->in[5] ? k->in[5][0] : 0.0f, k->in[6][0],
			      k->in[7] ? k->in[7][0] : 0.0f, sc[0], zp ? zp[0] : 0.0f, lo, hi,
			      (int)p[SKP_ACT], k->f[SKF_ACT_A], k->f[SKF_ACT_B]);
		} else {
			for (int64_t j = i; j < e;) {
				int64_t c = C == 1 ? 0 : (j / inner) % C;
				int64_t r = C == 1 ? e : SK_MIN(e, (j / inner + 1) * inner);
				q_run(a + (j - i), y + (j - i), r - j, (int)p[3], sc[c], zp ? zp[c] : 0.0f,
				      lo, hi);
				j = r;
			}
		}
		sk_store_save(y, sy, m, (void *)sk_elem(k->out, sy, i));
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
/* q_add_bytes_512 is q_stored's QUANT mode 5 (q_add) where both inputs
 * and the output are bytes, 16 values a step in registers instead of
 * chunks converted to float32 and back: the same float steps in q_add's
 * order ((a - za) * sa + (b - zb) * sb, ReLU as x > 0 ? x : 0, rint of
 * the quotient by s, + z, q_clamp's comparisons, so a NaN stays one),
 * stored truncated as sk_store_save stores. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
q_add_bytes_512(const uint8_t *a, int ca, const uint8_t *b, int cb, uint8_t *y, int64_t n, float sa,
		float za, float sb, float zb, float s, float z, float lo, float hi, int relu)
{
	const __m512 vsa = _mm512_set1_ps(sa), vza = _mm512_set1_ps(za), vsb = _mm512_set1_ps(sb);
	const __m512 vzb = _mm512_set1_ps(zb), vs = _mm512_set1_ps(s), vz = _mm512_set1_ps(z);
	const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi), zero = _mm512_setzero_ps();
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 mk = (__mmask16)(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
		/* whole loads but for the tail: this loop ran 1.8x as long
		 * with masked ones on Zen 5 */
		__m128i xa, xb;
		if (mk == 0xffff) {
			xa = _mm_loadu_si128((const __m128i *)(a + i));
			xb = _mm_loadu_si128((const __m128i *)(b + i));
		} else {
			xa = _mm_maskz_loadu_epi8(mk, a + i);
			xb = _mm_maskz_loadu_epi8(mk, b + i);
		}
		__m512 fa = _mm512_cvtepi32_ps(ca == SK_STORE_U8 ? _mm512_cvtepu8_epi32(xa) : _mm512_cvtepi8_epi32(xa));
		__m512 fb = _mm512_cvtepi32_ps(cb == SK_STORE_U8 ? _mm512_cvtepu8_epi32(xb) : _mm512_cvtepi8_epi32(xb));
		__m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(fa, vza), vsa),
					 _mm512_mul_ps(_mm512_sub_ps(fb, vzb), vsb));
		if (relu)
			v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), v);
		v = _mm512_roundscale_ps(_mm512_div_ps(v, vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
		v = _mm512_add_ps(v, vz);
		__m512 c = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, vhi, _CMP_GT_OQ), vhi);
		c = _mm512_mask_mov_ps(c, _mm512_cmp_ps_mask(v, vlo, _CMP_LT_OQ), vlo);
		__m128i o = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(c));
		if (mk == 0xffff)
			_mm_storeu_si128((__m128i *)(y + i), o);
		else
			_mm_mask_storeu_epi8(y + i, mk, o);
	}
}
#endif

/* q_add_bytes_ok: whether q_add_bytes runs QUANT's mode 5 (bytes in and
 * out, AVX-512, no activation but ReLU, a scale that is not 0). */
static int q_add_bytes_ok(const sk_kernel *k)
{
#if defined(__x86_64__) && defined(__GNUC__)
	const int64_t *p = k->p;
	int act = (int)p[SKP_ACT];
	return p[3] == SK_QUANT_ADD && sk_store_in(k, 0) && sk_store_in(k, 3) && sk_store_out(k) &&
	       (act == SK_ACT_NONE || act == SK_ACT_RELU) && k->in[1][0] != 0.0f &&
	       sk_gemm_isa() == SK_ISA_AVX512;
#else
	(void)k;
	return 0;
#endif
}

/* q_add_bytes runs [i0, i1) of QUANT's mode 5 with q_add_bytes_512. */
static void q_add_bytes(const sk_kernel *k, int64_t i0, int64_t i1, sk_ctx *ctx)
{
#if defined(__x86_64__) && defined(__GNUC__)
	const int64_t *p = k->p;
	int sx = sk_store_in(k, 0), sb = sk_store_in(k, 3), sy = sk_store_out(k);
	float sa = k->in[4][0], za = k->in[5] ? k->in[5][0] : 0.0f;
	float sbs = k->in[6][0], zb = k->in[7] ? k->in[7][0] : 0.0f;
	float s = k->in[1][0], z = k->in[2] ? k->in[2][0] : 0.0f;
	for (int64_t i = i0; i < i1; i += 4096) {
		SK_POLL(ctx);
		int64_t e = SK_MIN(i + 4096, i1);
		q_add_bytes_512((const uint8_t *)sk_elem(k->in[0], sx, i), sx,
				(const uint8_t *)sk_elem(k->in[3], sb, i), sb, (uint8_t *)sk_elem(k->out, sy, i),
				e - i, sa, za, sbs, zb, s, z, (float)p[4], (float)p[5], p[SKP_ACT] == SK_ACT_RELU);
	}
#else
	(void)k, (void)i0, (void)i1, (void)ctx;
#endif
}

void sk_block_quant(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t n = p[0], C = p[1], inner = p[2];
	float lo = (float)p[4], hi = (float)p[5];
	const float *x = k->in[0], *sc = k->in[1], *zp = k->in[2];
	if (p[3] == SK_QUANT_DYN_SCALE || p[3] == SK_QUANT_DYN_ZERO) {
		float mn, mx;
		SK_POLL(ctx);
		dyn_minmax(x, n, &mn, &mx);
		float scale = (mx - mn) / (hi - lo);
		if (p[3] == SK_QUANT_DYN_SCALE)
			k->out[0] = scale;
		else
			k->out[0] = scale == 0.0f ? lo : q_clamp(rintf(lo - mn / scale), lo, hi);
		return;
	}
	int64_t i0 = blk * k->t[0], i1 = SK_MIN(i0 + k->t[0], n);
	if (k->p[SKP_STORE]) {
		if (q_add_bytes_ok(k))
			q_add_bytes(k, i0, i1, ctx);
		else
			q_stored(k, i0, i1, ctx);
		return;
	}
	float *y = k->out;
	if (p[3] == SK_QUANT_ADD) {
		float sa = k->in[4][0], za = k->in[5] ? k->in[5][0] : 0.0f;
		float sb = k->in[6][0], zb = k->in[7] ? k->in[7][0] : 0.0f;
		float s = sc[0], z = zp ? zp[0] : 0.0f;
		for (int64_t i = i0; i < i1; i += 4096) {
			SK_POLL(ctx);
			int64_t e = SK_MIN(i + 4096, i1);
			q_add(x + i, k->in[3] + i, y + i, e - i, sa, za, sb, zb, s, z, lo, hi,
			      (int)p[SKP_ACT], k->f[SKF_ACT_A], k->f[SKF_ACT_B]);
		}
		return;
	}
	for (int64_t i = i0; i < i1; i += 4096) {
		SK_POLL(ctx);
		int64_t e = SK_MIN(i + 4096, i1);
		for (int64_t j = i; j < e;) {
			int64_t c = C == 1 ? 0 : (j / inner) % C;
			/* one run of the same channel */
			int64_t r = C == 1 ? e : SK_MIN(e, (j / inner + 1) * inner);
			float s = sc[c], z = zp ? zp[c] : 0.0f;
			q_run(x + j, y + j, r - j, (int)p[3], s, z, lo, hi);
			j = r;
		}
	}
}

/* ---- QGEMM --------------------------------------------------------------- */

/*
 * A block computes an mt x nt tile of one batch item. It packs its rows of
 * A as u8 (U = A + 128 where A is int8) and its columns of B as s8 panels
 * of 16 columns by 4 reduction steps (S = B - 128 where B is uint8), the
 * layout vpdpbusd reads, then
 *   acc = sum U*S - sb*sum_k U - ua*sum_k S + K*ua*sb
 * with ua = za (+128), sb = zb (-128): the exact integer sum of
 * (A - za)(B - zb).
 */

#define QG_MR 8
#define QG_VNNI_MR 4 /* the VNNI micro-kernel's rows and strips */
#define QG_VNNI_NS 4
#define QG_NR 32
#define QG_AMX_M 32          /* rows of one AMX call (2 A tiles) */

/* A micro-kernel writes rows x (16*strips) int32 sums into acc (leading
 * dimension lda): a block gathers a whole row group's columns there
 * before its epilogue. */
typedef void (*qg_micro_fn)(const uint8_t *u, int64_t ldu, const int8_t *s,
			    int64_t kp, int rows, int strips, int32_t *acc, int64_t lda);

/* qg_micro_c: portable micro-kernel. */
static void qg_micro_c(const uint8_t *u, int64_t ldu, const int8_t *s,
		       int64_t kp, int rows, int strips, int32_t *acc, int64_t lda)
{
	int64_t k4n = kp / 4;
	for (int r = 0; r < rows; r++) {
		for (int st = 0; st < strips; st++) {
			int32_t a[16] = {0};
			const int8_t *sp = s + st * k4n * 64;
			const uint8_t *ur = u + r * ldu;
			for (int64_t k4 = 0; k4 < k4n; k4++) {
				const uint8_t *uk = ur + 4 * k4;
				const int8_t *sk = sp + k4 * 64;
				for (int j = 0; j < 16; j++)
					a[j] += (int32_t)uk[0] * sk[4 * j] + (int32_t)uk[1] * sk[4 * j + 1] +
						(int32_t)uk[2] * sk[4 * j + 2] + (int32_t)uk[3] * sk[4 * j + 3];
			}
			memcpy(acc + r * lda + st * 16, a, sizeof(a));
		}
	}
}

/* qg_req_terms: what a whole tile's fused requantisation needs (the byte
 * epilogue with per-tensor zero points, qg_epilogue_b512 with ecol): each
 * column's integer terms (ecol) and multiplier (mcol, NULL where every one
 * is 1), each row's integer terms (rt) and multiplier (mrow), the output
 * zero point and clamp, and how the bytes are stored (code). Lanes past
 * cols are neither read nor stored. */
typedef struct qg_req_terms {
	const int32_t *ecol;
	const float *mcol;
	int32_t rt[QG_MR];
	float mrow[QG_MR];
	float zy, lo, hi;
	int code;
	int cols; /* the micro-tile's columns in the output (the rest masked) */
} qg_req_terms;

/* qg_req_packs: whether a requantised output's clamp stays within its
 * byte code's range, so that qg_pack64's saturation is the truncating
 * store's two's complement. */
static inline int qg_req_packs(int code, float lo, float hi)
{
	if (code == SK_STORE_U8)
		return lo >= 0.0f && hi <= 255.0f;
	return code == SK_STORE_S8 && lo >= -128.0f && hi <= 127.0f;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define QG_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

/* qg_dp44 adds the products of u's 4 rows and the 4 strips' panels at s
 * (k4n steps of 4) into c: the loop of a whole 4 x 4 tile, inlined into
 * each kernel that runs one, so that c stays in registers there. */
QG_VNNI_TARGET static inline __attribute__((always_inline)) void
qg_dp44(const uint8_t *u, int64_t ldu, const int8_t *s, int64_t k4n, __m512i c[QG_VNNI_MR][QG_VNNI_NS])
{
	const int8_t *s0 = s, *s1 = s + k4n * 64, *s2 = s + 2 * k4n * 64, *s3 = s + 3 * k4n * 64;
	for (int64_t k4 = 0; k4 < k4n; k4++) {
		__m512i b0 = _mm512_loadu_si512((const void *)(s0 + k4 * 64));
		__m512i b1 = _mm512_loadu_si512((const void *)(s1 + k4 * 64));
		__m512i b2 = _mm512_loadu_si512((const void *)(s2 + k4 * 64));
		__m512i b3 = _mm512_loadu_si512((const void *)(s3 + k4 * 64));
#pragma GCC unroll 4
		for (int r = 0; r < QG_VNNI_MR; r++) {
			int32_t a4;
			memcpy(&a4, u + r * ldu + 4 * k4, 4);
			__m512i a = _mm512_set1_epi32(a4);
			c[r][0] = _mm512_dpbusd_epi32(c[r][0], a, b0);
			c[r][1] = _mm512_dpbusd_epi32(c[r][1], a, b1);
			c[r][2] = _mm512_dpbusd_epi32(c[r][2], a, b2);
			c[r][3] = _mm512_dpbusd_epi32(c[r][3], a, b3);
		}
	}
}

/* qg_dp82: qg_dp44 for a whole 8 x 2 tile (c0, c1: its two strips). */
QG_VNNI_TARGET static inline __attribute__((always_inline)) void
qg_dp82(const uint8_t *u, int64_t ldu, const int8_t *s, int64_t k4n, __m512i c0[QG_MR], __m512i c1[QG_MR])
{
	const int8_t *s0 = s, *s1 = s + k4n * 64;
	for (int64_t k4 = 0; k4 < k4n; k4++) {
		__m512i b0 = _mm512_loadu_si512((const void *)(s0 + k4 * 64));
		__m512i b1 = _mm512_loadu_si512((const void *)(s1 + k4 * 64));
#pragma GCC unroll 8
		for (int r = 0; r < QG_MR; r++) {
			int32_t a4;
			memcpy(&a4, u + r * ldu + 4 * k4, 4);
			__m512i a = _mm512_set1_epi32(a4);
			c0[r] = _mm512_dpbusd_epi32(c0[r], a, b0);
			c1[r] = _mm512_dpbusd_epi32(c1[r], a, b1);
		}
	}
}

/* qg_micro_vnni82_full: qg_micro_vnni on a whole 8 x 2 tile, its own
 * function so that its accumulators stay in registers (see
 * qg_micro_vnni44_full). */
QG_VNNI_TARGET static void qg_micro_vnni82_full(const uint8_t *u, int64_t ldu, const int8_t *s,
						int64_t k4n, int32_t *acc, int64_t lda)
{
	__m512i c0[QG_MR], c1[QG_MR];
#pragma GCC unroll 8
	for (int r = 0; r < QG_MR; r++) {
		c0[r] = _mm512_setzero_si512();
		c1[r] = _mm512_setzero_si512();
	}
	qg_dp82(u, ldu, s, k4n, c0, c1);
#pragma GCC unroll 8
	for (int r = 0; r < QG_MR; r++) {
		_mm512_storeu_si512((void *)(acc + r * lda), c0[r]);
		_mm512_storeu_si512((void *)(acc + r * lda + 16), c1[r]);
	}
}

/* qg_micro_vnni: up to 8 rows x 2 strips (32 columns). */
QG_VNNI_TARGET static void qg_micro_vnni(const uint8_t *u, int64_t ldu,
					 const int8_t *s, int64_t kp, int rows,
					 int strips, int32_t *acc, int64_t lda)
{
	int64_t k4n = kp / 4;
	if (strips == 2 && rows == QG_MR) {
		qg_micro_vnni82_full(u, ldu, s, k4n, acc, lda);
		return;
	}
	const int8_t *s0 = s, *s1 = s + k4n * 64;
	__m512i c0[QG_MR], c1[QG_MR];
	for (int r = 0; r < QG_MR; r++) {
		c0[r] = _mm512_setzero_si512();
		c1[r] = _mm512_setzero_si512();
	}
	for (int64_t k4 = 0; k4 < k4n; k4++) {
		__m512i b0 = _mm512_loadu_si512((const void *)(s0 + k4 * 64));
		__m512i b1 = strips == 2 ? _mm512_loadu_si512((const void *)(s1 + k4 * 64))
					 : _mm512_setzero_si512();
		for (int r = 0; r < rows; r++) {
			int32_t a4;
			memcpy(&a4, u + r * ldu + 4 * k4, 4);
			__m512i a = _mm512_set1_epi32(a4);
			c0[r] = _mm512_dpbusd_epi32(c0[r], a, b0);
			c1[r] = _mm512_dpbusd_epi32(c1[r], a, b1);
		}
	}
	for (int r = 0; r < rows; r++) {
		_mm512_storeu_si512((void *)(acc + r * lda), c0[r]);
		if (strips == 2)
			_mm512_storeu_si512((void *)(acc + r * lda + 16), c1[r]);
	}
}

/* qg_micro_vnni44_full: qg_micro_vnni44 on a whole 4 x 4 tile, its own
 * function so that its 16 accumulators stay in registers (sharing them
 * with the partial tiles' loop, GCC copied each between registers on
 * every reduction step). */
QG_VNNI_TARGET static void qg_micro_vnni44_full(const uint8_t *u, int64_t ldu, const int8_t *s,
						int64_t k4n, int32_t *acc, int64_t lda)
{
	__m512i c[QG_VNNI_MR][QG_VNNI_NS];
#pragma GCC unroll 4
	for (int r = 0; r < QG_VNNI_MR; r++)
#pragma GCC unroll 4
		for (int j = 0; j < QG_VNNI_NS; j++)
			c[r][j] = _mm512_setzero_si512();
	qg_dp44(u, ldu, s, k4n, c);
#pragma GCC unroll 4
	for (int r = 0; r < QG_VNNI_MR; r++)
#pragma GCC unroll 4
		for (int j = 0; j < QG_VNNI_NS; j++)
			_mm512_storeu_si512((void *)(acc + r * lda + 16 * j), c[r][j]);
}

/* qg_micro_vnni44: up to 4 rows x 4 strips (64 columns), 16 accumulators;
 * per 4 reduction steps 4 panel loads and 4 broadcasts feed 16 dpbusd,
 * where qg_micro_vnni's 8 x 2 takes 2 loads and 8 broadcasts. Measured on
 * Zen 5 (ResNet-18-int8's layers): faster where a tile has more than 4
 * strips, slower on tiles of 4 or fewer (7x7 outputs); 5 or 6 rows spill. */
QG_VNNI_TARGET static void qg_micro_vnni44(const uint8_t *u, int64_t ldu,
					 const int8_t *s, int64_t kp, int rows,
					 int strips, int32_t *acc, int64_t lda)
{
	int64_t k4n = kp / 4;
	if (rows == QG_VNNI_MR && strips == QG_VNNI_NS) {
		qg_micro_vnni44_full(u, ldu, s, k4n, acc, lda);
		return;
	}
	const int8_t *sp[QG_VNNI_NS];
	for (int j = 0; j < QG_VNNI_NS; j++)
		sp[j] = s + SK_MIN(j, strips - 1) * k4n * 64;
	__m512i c[QG_VNNI_MR][QG_VNNI_NS];
	for (int r = 0; r < QG_VNNI_MR; r++)
		for (int j = 0; j < QG_VNNI_NS; j++)
			c[r][j] = _mm512_setzero_si512();
	for (int64_t k4 = 0; k4 < k4n; k4++) {
		__m512i b[QG_VNNI_NS];
		for (int j = 0; j < strips; j++)
			b[j] = _mm512_loadu_si512((const void *)(sp[j] + k4 * 64));
		for (int r = 0; r < rows; r++) {
			int32_t a4;
			memcpy(&a4, u + r * ldu + 4 * k4, 4);
			__m512i a = _mm512_set1_epi32(a4);
			for (int j = 0; j < strips; j++)
				c[r][j] = _mm512_dpbusd_epi32(c[r][j], a, b[j]);
		}
	}
	for (int r = 0; r < rows; r++)
		for (int j = 0; j < strips; j++)
			_mm512_storeu_si512((void *)(acc + r * lda + 16 * j), c[r][j]);
}

/* ---- requantising in registers ---------------------------------------- */

#define QG_REQ_TARGET __attribute__((target("avx512f,avx512bw")))

/* qg_req16 requantises 16 sums whose integer terms are added (v): times
 * the row's multiplier, then the column's (mc), rounded to nearest even,
 * plus the zero point, clamped, as int32. The float steps are
 * qg_epilogue's (rint(v * mrow * mcol) + zy clamped to [lo, hi]), taken
 * as: the product clamped to [lo - zy, hi - zy] (max, then min: a NaN
 * becomes lo - zy, as the epilogue's max makes it lo), converted rounding
 * to nearest even, plus zy as an integer. The same values: lo - zy and
 * hi - zy are integers, exact in float, and rint keeps a value between
 * two integers between them; zyi, lo and hi are qg_req_bounds'. */
QG_REQ_TARGET static inline __m512i qg_req16(__m512i v, __m512 mrow, int mc, __m512 mcol, __m512i zyi,
					     __m512 lo, __m512 hi)
{
	__m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), mrow);
	if (mc)
		f = _mm512_mul_ps(f, mcol);
	f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
	return _mm512_add_epi32(_mm512_cvt_roundps_epi32(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
				zyi);
}

/* qg_req_bounds sets qg_req16's zero point (as int32) and clamp (less it)
 * from the epilogue's zy, lo and hi (integers in the byte range). */
QG_REQ_TARGET static inline void qg_req_bounds(float zy, float lo, float hi, __m512i *zyi, __m512 *vlo,
					       __m512 *vhi)
{
	*zyi = _mm512_set1_epi32((int32_t)zy);
	*vlo = _mm512_set1_ps(lo - zy);
	*vhi = _mm512_set1_ps(hi - zy);
}

/* qg_pack64 narrows 4 x 16 int32 values, each within the byte range of
 * code (qg_req_packs), to 64 bytes in order: two saturating packs (the
 * values fit, so saturation changes none) and a permutation of their
 * 128-bit lanes' dwords. One store of 64 bytes then replaces 4 narrowing
 * moves (2 uops each) and 4 stores. */
QG_REQ_TARGET static inline __m512i qg_pack64(__m512i a, __m512i b, __m512i c, __m512i d, int code)
{
	const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
	__m512i w;
	if (code == SK_STORE_U8)
		w = _mm512_packus_epi16(_mm512_packus_epi32(a, b), _mm512_packus_epi32(c, d));
	else
		w = _mm512_packs_epi16(_mm512_packs_epi32(a, b), _mm512_packs_epi32(c, d));
	return _mm512_permutexvar_epi32(idx, w);
}

/* qg_colmask16 is the lanes of strip j (16 columns) below cols. */
static inline __mmask16 qg_colmask16(int cols, int j)
{
	int w = cols - 16 * j;
	return w >= 16 ? (__mmask16)0xffff : (w <= 0 ? 0 : (__mmask16)((1u << w) - 1));
}

/* qg_ld32 / qg_ldps are the 16 int32 values / floats at p in the lanes
 * of mk (0 in the others), with a whole load where mk holds all 16: in
 * these loops a masked load cost more than a whole one on Zen 5 (the
 * epilogue 1.1-1.2x; QLinearAdd on bytes 1.8x, see q_add_bytes_512),
 * though a stream of them alone runs within 10% of whole ones. */
__attribute__((target("avx512f"))) static inline __m512i qg_ld32(__mmask16 mk, const int32_t *p)
{
	return mk == 0xffff ? _mm512_loadu_si512((const void *)p) : _mm512_maskz_loadu_epi32(mk, p);
}

__attribute__((target("avx512f"))) static inline __m512 qg_ldps(__mmask16 mk, const float *p)
{
	return mk == 0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(mk, p);
}

/* qg_micro_vnni44_req: qg_micro_vnni44_full, requantised in registers
 * and stored as bytes: row r's t->cols (up to 64) columns at y + r * ldc.
 * The same bits as the micro-kernel, then qg_epilogue_b512 with ecol. */
QG_VNNI_TARGET static void qg_micro_vnni44_req(const uint8_t *u, int64_t ldu, const int8_t *s,
					       int64_t k4n, const qg_req_terms *t, uint8_t *y,
					       int64_t ldc)
{
	__m512i c[QG_VNNI_MR][QG_VNNI_NS];
#pragma GCC unroll 4
	for (int r = 0; r < QG_VNNI_MR; r++) {
		__m512i rt = _mm512_set1_epi32(t->rt[r]);
#pragma GCC unroll 4
		for (int j = 0; j < QG_VNNI_NS; j++) /* the integer terms first: exact */
			c[r][j] = _mm512_add_epi32(
				qg_ld32(qg_colmask16(t->cols, j), t->ecol + 16 * j), rt);
	}
	qg_dp44(u, ldu, s, k4n, c);
	/* the sums pinned in registers here: without it GCC copied all 16
	 * between registers every step of the loop above */
#pragma GCC unroll 4
	for (int r = 0; r < QG_VNNI_MR; r++)
#pragma GCC unroll 4
		for (int jj = 0; jj < QG_VNNI_NS; jj++)
			__asm__("" : "+v"(c[r][jj]));
	__m512i zy;
	__m512 lo, hi;
	qg_req_bounds(t->zy, t->lo, t->hi, &zy, &lo, &hi);
	int mc = t->mcol != NULL;
	__m512 mcol[QG_VNNI_NS];
#pragma GCC unroll 4
	for (int j = 0; j < QG_VNNI_NS; j++)
		mcol[j] = mc ? qg_ldps(qg_colmask16(t->cols, j), t->mcol + 16 * j) : lo;
	__mmask64 ym = t->cols >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << t->cols) - 1;
#pragma GCC unroll 4
	for (int r = 0; r < QG_VNNI_MR; r++) {
		__m512 mrow = _mm512_set1_ps(t->mrow[r]);
		__m512i q[QG_VNNI_NS];
#pragma GCC unroll 4
		for (int j = 0; j < QG_VNNI_NS; j++)
			q[j] = qg_req16(c[r][j], mrow, mc, mcol[j], zy, lo, hi);
		__m512i w = qg_pack64(q[0], q[1], q[2], q[3], t->code);
		if (t->cols >= 64)
			_mm512_storeu_si512((void *)(y + r * ldc), w);
		else
			_mm512_mask_storeu_epi8(y + r * ldc, ym, w);
	}
}

/* qg_micro_vnni82_req: qg_micro_vnni82_full, requantised in registers
 * and stored as bytes: row r's t->cols (up to 32) columns at y + r * ldc. */
QG_VNNI_TARGET static void qg_micro_vnni82_req(const uint8_t *u, int64_t ldu, const int8_t *s,
					       int64_t k4n, const qg_req_terms *t, uint8_t *y,
					       int64_t ldc)
{
	__m512i c0[QG_MR], c1[QG_MR];
	__mmask16 k0 = qg_colmask16(t->cols, 0), k1 = qg_colmask16(t->cols, 1);
	__m512i e0 = qg_ld32(k0, t->ecol);
	__m512i e1 = qg_ld32(k1, t->ecol + 16);
#pragma GCC unroll 8
	for (int r = 0; r < QG_MR; r++) {
		__m512i rt = _mm512_set1_epi32(t->rt[r]);
		c0[r] = _mm512_add_epi32(e0, rt);
		c1[r] = _mm512_add_epi32(e1, rt);
	}
	qg_dp82(u, ldu, s, k4n, c0, c1);
	/* pinned, as in qg_micro_vnni44_req */
#pragma GCC unroll 8
	for (int r = 0; r < QG_MR; r++)
		__asm__("" : "+v"(c0[r]), "+v"(c1[r]));
	__m512i zy;
	__m512 lo, hi;
	qg_req_bounds(t->zy, t->lo, t->hi, &zy, &lo, &hi);
	int mc = t->mcol != NULL;
	__m512 m0 = mc ? qg_ldps(k0, t->mcol) : lo;
	__m512 m1 = mc ? qg_ldps(k1, t->mcol + 16) : lo;
	__mmask32 ym = t->cols >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << t->cols) - 1;
#pragma GCC unroll 4
	for (int r = 0; r < QG_MR; r += 2) {
		__m512 ma = _mm512_set1_ps(t->mrow[r]), mb = _mm512_set1_ps(t->mrow[r + 1]);
		__m512i w = qg_pack64(qg_req16(c0[r], ma, mc, m0, zy, lo, hi),
				      qg_req16(c1[r], ma, mc, m1, zy, lo, hi),
				      qg_req16(c0[r + 1], mb, mc, m0, zy, lo, hi),
				      qg_req16(c1[r + 1], mb, mc, m1, zy, lo, hi), t->code);
		if (t->cols >= 32) {
			_mm256_storeu_si256((__m256i *)(y + r * ldc), _mm512_castsi512_si256(w));
			_mm256_storeu_si256((__m256i *)(y + (r + 1) * ldc), _mm512_extracti64x4_epi64(w, 1));
		} else {
			_mm256_mask_storeu_epi8(y + r * ldc, ym, _mm512_castsi512_si256(w));
			_mm256_mask_storeu_epi8(y + (r + 1) * ldc, ym, _mm512_extracti64x4_epi64(w, 1));
		}
	}
}

#define QG_AVX2_TARGET __attribute__((target("avx2")))

/* qg_micro_avx2: u8 and s8 widened to int16, vpmaddwd (exact: each pair
 * sum fits int32), two rows at a time. */
QG_AVX2_TARGET static void qg_micro_avx2(const uint8_t *u, int64_t ldu,
					 const int8_t *s, int64_t kp, int rows,
					 int strips, int32_t *acc, int64_t lda)
{
	int64_t k4n = kp / 4;
	for (int st = 0; st < strips; st++) {
		const int8_t *sp = s + st * k4n * 64;
		for (int r = 0; r < rows; r += 2) {
			int two = r + 1 < rows;
			__m256i c[2][4];
			for (int i = 0; i < 4; i++)
				c[0][i] = c[1][i] = _mm256_setzero_si256();
			const uint8_t *u0 = u + r * ldu, *u1 = u0 + (two ? ldu : 0);
			for (int64_t k4 = 0; k4 < k4n; k4++) {
				__m256i b[4];
				for (int i = 0; i < 4; i++)
					b[i] = _mm256_cvtepi8_epi16(_mm_loadu_si128(
						(const __m128i *)(sp + k4 * 64 + 16 * i)));
				int32_t a0, a1;
				memcpy(&a0, u0 + 4 * k4, 4);
				memcpy(&a1, u1 + 4 * k4, 4);
				__m256i w0 = _mm256_broadcastq_epi64(
					_mm_cvtepu8_epi16(_mm_cvtsi32_si128(a0)));
				__m256i w1 = _mm256_broadcastq_epi64(
					_mm_cvtepu8_epi16(_mm_cvtsi32_si128(a1)));
				for (int i = 0; i < 4; i++) {
					c[0][i] = _mm256_add_epi32(c[0][i], _mm256_madd_epi16(w0, b[i]));
					c[1][i] = _mm256_add_epi32(c[1][i], _mm256_madd_epi16(w1, b[i]));
				}
			}
			for (int h = 0; h <= two; h++) {
				/* c[h][i] holds columns 4i..4i+3 as pairs of partial
				 * sums: add each pair */
				int32_t t[32];
				for (int i = 0; i < 4; i++)
					_mm256_storeu_si256((__m256i *)(t + 8 * i), c[h][i]);
				for (int j = 0; j < 16; j++)
					acc[(r + h) * lda + st * 16 + j] = t[2 * j] + t[2 * j + 1];
			}
		}
	}
}

#define QG_AMX_TARGET __attribute__((target("amx-tile,amx-int8")))

/* AMX tile configuration (palette 1): tiles 0-3 the 32 x 32 int32 sums
 * (16 rows x 16 columns each), 4-5 two A tiles (16 rows x 64 u8), 6-7 two
 * B tiles (16 steps of 4 x 16 columns of s8: the S panels as packed). */
typedef struct qg_tilecfg {
	uint8_t palette, start;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
} qg_tilecfg;

/* qg_amx_begin loads the tile configuration for a block's AMX calls;
 * qg_amx_end releases the tiles. */
/* The configuration lives in static memory: GCC 12 does not see
 * ldtilecfg read its operand, and drops stores to a local one. */
static const qg_tilecfg qg_cfg __attribute__((aligned(64))) = {
	.palette = 1,
	.colsb = {64, 64, 64, 64, 64, 64, 64, 64},
	.rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

QG_AMX_TARGET static void qg_amx_begin(void) { _tile_loadconfig(&qg_cfg); }

QG_AMX_TARGET static void qg_amx_end(void) { _tile_release(); }

/* qg_micro_amx: a 32 x 32 tile of U (32 rows, ldu) times two S panels over
 * kp (a multiple of 64) into acc (32 x 32, leading dimension lda), between
 * qg_amx_begin and qg_amx_end. */
QG_AMX_TARGET static void qg_micro_amx(const uint8_t *u, int64_t ldu, const int8_t *s,
				       int64_t kp, int32_t *acc, int64_t lda)
{
	int64_t k4n = kp / 4;
	const int8_t *s0 = s, *s1 = s + k4n * 64;
	_tile_zero(0);
	_tile_zero(1);
	_tile_zero(2);
	_tile_zero(3);
	for (int64_t kk = 0; kk < kp; kk += 64) {
		_tile_loadd(4, u + kk, ldu);
		_tile_loadd(5, u + 16 * ldu + kk, ldu);
		_tile_loadd(6, s0 + kk * 16, 64);
		_tile_loadd(7, s1 + kk * 16, 64);
		_tile_dpbusd(0, 4, 6);
		_tile_dpbusd(1, 4, 7);
		_tile_dpbusd(2, 5, 6);
		_tile_dpbusd(3, 5, 7);
	}
	_tile_stored(0, acc, lda * 4);
	_tile_stored(1, acc + 16, lda * 4);
	_tile_stored(2, acc + 16 * lda, lda * 4);
	_tile_stored(3, acc + 16 * lda + 16, lda * 4);
}
#else
/* Without x86-64 and GCC only the portable kernels exist: qg_cpu stays
 * all 0, so these never run. */
#define qg_micro_vnni qg_micro_c
#define qg_micro_vnni44 qg_micro_c
#define qg_micro_vnni44_req(...) ((void)0)
#define qg_micro_vnni82_req(...) ((void)0)
#define qg_micro_avx2 qg_micro_c
#define qg_micro_amx(...) ((void)0)
#define qg_amx_begin() ((void)0)
#define qg_amx_end() ((void)0)
#endif

/* What the CPU offers the integer kernels, probed once (avx512: F, BW
 * and VL; vbmi: and VBMI's byte permutations). AMX tile data also needs
 * the kernel's leave for the process (arch_prctl ARCH_REQ_XCOMP_PERM). */
static struct {
	int avx2, avx512, vnni, vbmi, amx;
} qg_cpu;
static pthread_once_t qg_cpu_once = PTHREAD_ONCE_INIT;

static void qg_probe(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	__builtin_cpu_init();
	qg_cpu.avx2 = __builtin_cpu_supports("avx2");
	qg_cpu.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
			 __builtin_cpu_supports("avx512vl");
	qg_cpu.vnni = qg_cpu.avx512 && __builtin_cpu_supports("avx512vnni");
	qg_cpu.vbmi = qg_cpu.avx512 && __builtin_cpu_supports("avx512vbmi");
#if defined(__linux__)
	if (__builtin_cpu_supports("amx-int8") && __builtin_cpu_supports("amx-tile"))
		qg_cpu.amx = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */,
				     18 /* XFEATURE_XTILEDATA */) == 0;
#endif
#endif
}

/* The micro-kernels in use (enum sk_qgemm_kernel; tests and benchmarks
 * compare them): the best the CPU has is AMX for whole 32 x 32 tiles
 * where K pads to 64, else VNNI, else AVX2, else C. */
static int qg_kernel = SK_QGEMM_BEST;

void sk_qgemm_set_kernel(int which)
{
	qg_kernel = which < SK_QGEMM_BEST || which > SK_QGEMM_NO_AMX ? SK_QGEMM_BEST : which;
}

/* qg_impl is what one block runs: the vector micro-kernel, whether whole
 * 32 x 32 tiles go to AMX (K padded to 64 by the compiler: p[28]), and
 * whether the packing uses AVX-512. */
typedef struct qg_impl {
	qg_micro_fn micro; /* QG_MR rows x 2 strips */
	qg_micro_fn micro44; /* QG_VNNI_MR rows x QG_VNNI_NS strips, or NULL */
	int amx, pack512;
	int req; /* whole tiles requantised in registers (the VNNI kernels) */
} qg_impl;

int sk_qgemm_vnni(void)
{
	pthread_once(&qg_cpu_once, qg_probe);
	return qg_cpu.vnni && qg_kernel != SK_QGEMM_PORTABLE && qg_kernel != SK_QGEMM_NO_VNNI;
}

int sk_cpu_vbmi(void)
{
	pthread_once(&qg_cpu_once, qg_probe);
	return qg_cpu.vbmi;
}

int sk_qgemm_amx(void)
{
	pthread_once(&qg_cpu_once, qg_probe);
	return qg_cpu.amx;
}

static qg_impl qg_choose(int64_t kp)
{
	pthread_once(&qg_cpu_once, qg_probe);
	qg_impl q = {qg_micro_c, NULL, 0, 0, 0};
	if (qg_kernel == SK_QGEMM_PORTABLE)
		return q;
	q.pack512 = qg_cpu.avx512;
	if (qg_cpu.vnni && qg_kernel != SK_QGEMM_NO_VNNI)
		q.micro = qg_micro_vnni, q.micro44 = qg_micro_vnni44, q.req = 1;
	else if (qg_cpu.avx2)
		q.micro = qg_micro_avx2;
	q.amx = qg_cpu.amx && qg_kernel == SK_QGEMM_BEST && kp % 64 == 0;
	return q;
}

/* Tile sizes: the packed panels (mt + nt) x Kp bytes stay in L2. */
#define QG_TILE_BYTES (768 * 1024)

/* qg_store_ok: bytes only for an unpacked A, an unpacked B (or its
 * im2col) and a requantised Y within 8 bits. */
static int qg_store_ok(const int64_t *p)
{
	unsigned ops = (p[22] == 1 && p[23] >= -128 && p[24] <= 255 ? 1u : 0) |
		       (p[26] == 0 ? 1u << 1 : 0) | (p[25] == 0 ? 1u << 2 : 0);
	return sk_store_ok(p[SKP_STORE], ops);
}

static int qg_params_ok(const sk_kernel *k)
{
	const int64_t *p = k->p;
	return p[0] > 0 && p[1] > 0 && p[2] > 0 && p[6] > 0 && p[7] > 0 &&
	       p[18] >= 0 && p[18] <= 1 && p[19] >= 0 && p[19] <= 1 &&
	       p[20] >= 0 && p[20] <= 3 && p[21] >= 0 && p[21] <= 2 &&
	       p[22] >= 0 && p[22] <= 1 && p[23] <= p[24] &&
	       (p[25] == 0 || (p[25] == 1 && k->in[6] != NULL)) &&
	       (p[26] == 0 || (p[26] == 1 && k->in[7] != NULL)) &&
	       (p[27] == 0 || (p[27] == 1 && k->aux != NULL) ||
		(p[27] == 2 && k->aux != NULL && p[25] == 0 && p[26] == 1 && p[19] == 0 &&
		 k->in[7] != NULL)) &&
	       p[28] >= p[2] && p[28] % 4 == 0 && qg_store_ok(p);
}

/* A 1x1 convolution whose every position lies inside the input (no
 * padding before it, none read after it) reads one input byte per channel
 * and position, at column ow*SW of row oh*SH: a block gathers its
 * positions' bytes into rows of its own (qg_gather_1x1) and packs those as
 * a plain GEMM's columns, where the byte image would convert every input
 * row of every channel for each block (ResNet-50's stride-2 shortcuts:
 * 1024 channels of a 14x14 plane for 8 blocks of 49 positions each). A
 * pointwise one (stride 1) is read in place and never gets here. */
static int qg_gather_1x1_ok(const int64_t *c, int code)
{
	return code && c[6] == 1 && c[7] == 1 && c[10] == 0 && c[11] == 0 &&
	       (c[14] - 1) * c[8] < c[2] && (c[15] - 1) * c[9] < c[3];
}

/* qg_scratch_bytes is a block's scratch: the row and column sums, the
 * accumulator tile, the tile's per-column terms (3 x nt), the U tile (mt x
 * kp, 64-aligned), the S panels (nt rounded to QG_NR, x kp) and, for a
 * convolution's im2col, its input rows as bytes (img bytes: see
 * qg_img_bytes) or else its columns as floats, K x nt of them. */
static int64_t qg_scratch_bytes(int64_t mt, int64_t nt, int64_t kp, int64_t K, int64_t im2col,
				int64_t img)
{
	int64_t b = 4 * (mt + nt) + 4 * QG_AMX_M * SK_CDIV(nt, QG_NR) * QG_NR + 3 * 4 * nt + 64 + mt * kp +
		    SK_CDIV(nt, QG_NR) * QG_NR * kp;
	/* the byte image, then its offset of each reduction row (int32) */
	return b + (im2col ? (img ? img + 4 * K + 4 : 4 * K * nt) : 0) + 64;
}

/* The byte image of a convolution's input: a block converts the input rows
 * its nt positions read, of every channel of its group, to s8 once
 * (qg_img_fill), padding included, so that its im2col reads bytes at fixed
 * offsets instead of converting each value KH*KW times. QG_IMG_FRONT and
 * QG_IMG_BACK are slack around it: a strip's 16- or 32-byte loads start
 * up to 30 bytes before a row's first column and end up to 31 after its
 * last (lanes of other rows, blended away). QG_IMG_MAX bounds an image
 * (else the float im2col runs). */
#define QG_IMG_FRONT 32
#define QG_IMG_BACK 64
#define QG_IMG_MAX (1 << 20)

/* qg_img_row is the length of one image row: the columns -PL .. the last
 * any window reads (c: the 16 convolution parameters). */
static int64_t qg_img_row(const int64_t *c)
{
	int64_t W = c[3], KW = c[7], SW = c[9], PL = c[11], DW = c[13], OW = c[15];
	int64_t last = (OW - 1) * SW - PL + (KW - 1) * DW;
	return PL + SK_MAX(W - 1, last) + 1;
}

/* qg_img_bytes is the byte image's size for blocks of nt positions (0: the
 * float im2col runs instead: column strides over 2, or too large). */
static int64_t qg_img_bytes(const int64_t *c, int64_t nt)
{
	int64_t Cg = c[1] / c[5], KH = c[6], SH = c[8], SW = c[9], DH = c[12], OH = c[14], OW = c[15];
	if (SW > 2 || c[11] < 0)
		return 0;
	int64_t orows = SK_MIN(OH, (nt - 1) / OW + 2); /* output rows a block spans */
	int64_t rows = (orows - 1) * SH + (KH - 1) * DH + 1;
	int64_t b = Cg * rows * qg_img_row(c) + QG_IMG_FRONT + QG_IMG_BACK;
	return b <= QG_IMG_MAX ? b : 0;
}

/* qg_rows_scratch_bytes is a transposed block's scratch (qg_block_rows):
 * the row sums, QG_MR rows of sums over the tile's columns, the per-column
 * terms (3 x ct), the U tile (pt x kp, 64-aligned) and the byte image (img
 * bytes). */
static int64_t qg_rows_scratch_bytes(int64_t pt, int64_t ct, int64_t kp, int64_t img)
{
	return 4 * pt + 4 * QG_MR * SK_CDIV(ct, QG_NR) * QG_NR + 3 * 4 * ct + 64 + pt * kp + img + 64;
}

/* qg_prep_rows tiles a convolution's QGEMM run transposed (qg_block_rows):
 * blocks of whole micro-kernel row groups of positions, as many as the
 * units want (each block builds only its positions' rows), small enough
 * that the rows and one group of S panels stay in cache; then, where an
 * image has too few positions for the units, blocks of channels. */
static void qg_prep_rows(sk_kernel *k, int units)
{
	const int64_t *p = k->p;
	int64_t M = p[0], N = p[1], nb = p[6] * p[7], kp = p[28];
	int64_t groups = SK_CDIV(N, QG_VNNI_MR);
	int64_t ptiles = SK_MIN(groups, SK_MAX((int64_t)1, SK_CDIV((int64_t)units, nb)));
	int64_t pt = SK_CDIV(groups, ptiles) * QG_VNNI_MR;
	while (pt > QG_VNNI_MR && (pt + 16 * QG_VNNI_NS) * kp > QG_TILE_BYTES)
		pt = SK_CDIV(pt / 2, QG_VNNI_MR) * QG_VNNI_MR;
	ptiles = SK_CDIV(N, pt);
	int64_t ct = SK_CDIV(M, 16) * 16;
	if (nb * ptiles < units) {
		int64_t want = SK_CDIV((int64_t)units, nb * ptiles);
		ct = SK_MAX((int64_t)16 * QG_VNNI_NS, SK_CDIV(SK_CDIV(M, want), 16) * 16);
	}
	k->t[0] = pt;
	k->t[1] = ct;
	k->t[2] = ptiles;
	k->t[3] = SK_CDIV(M, ct);
	k->t[4] = kp;
	k->t[5] = qg_choose(kp).pack512 ? qg_img_bytes(k->aux, pt) : 0;
	k->t[6] = k->t[5] ? qg_img_row(k->aux) : 0;
	k->t[7] = 2;
	k->scratch = SK_CDIV(qg_rows_scratch_bytes(pt, ct, kp, k->t[5]), 4);
	k->grid = nb * ptiles * k->t[3];
}

void sk_prep_qgemm(sk_kernel *k, int units)
{
	if (!qg_params_ok(k)) {
		k->grid = -1;
		return;
	}
	const int64_t *p = k->p;
	int64_t M = p[0], N = p[1], K = p[2], nb = p[6] * p[7];
	int64_t kp = p[28]; /* K padded (to 4, or to 64 for AMX tiles) */
	if (p[27] == 2) {
		qg_prep_rows(k, units);
		return;
	}
	int64_t nt = SK_MIN(SK_CDIV(N, QG_NR) * QG_NR, 256);
	/* a packed A is read in place (no scratch): take many rows, so that
	 * B's panel (and its im2col) is built for as few row tiles as can be */
	int64_t mt = SK_MIN(M, p[26] ? 256 : 64);
	/* keep the block's scratch in cache: the U tile (unless packed), the
	 * S panel, the im2col tile (4 bytes a value) */
	int64_t mu = p[26] ? 0 : 1, cf = p[27] ? 5 : 1;
	while (nt > QG_NR && (mu * mt + cf * nt) * kp > QG_TILE_BYTES)
		nt -= QG_NR;
	while (mu && mt > QG_MR && (mt + cf * nt) * kp > QG_TILE_BYTES)
		mt = SK_CDIV(mt / 2, QG_MR) * QG_MR;
	int64_t mtiles = SK_CDIV(M, mt), ntiles = SK_CDIV(N, nt);
	/* enough blocks for the units: split columns, then rows */
	while (nb * mtiles * ntiles < 4 * (int64_t)units && nt > QG_NR) {
		nt = SK_CDIV(nt / 2, QG_NR) * QG_NR;
		ntiles = SK_CDIV(N, nt);
	}
	/* rows last: each row tile of an im2col builds its columns again, so
	 * there two blocks a unit will do */
	int64_t rblocks = (p[27] ? 2 : 4) * (int64_t)units;
	while (nb * mtiles * ntiles < rblocks && mt > QG_MR) {
		mt = SK_CDIV(mt / 2, QG_MR) * QG_MR;
		mtiles = SK_CDIV(M, mt);
	}
	k->t[0] = mt;
	k->t[1] = nt;
	k->t[2] = mtiles;
	k->t[3] = ntiles;
	k->t[4] = kp;
	k->t[7] = 0;
	/* an im2col reads a byte image of its input rows where it can */
	k->t[5] = p[27] && qg_choose(kp).pack512 && !qg_gather_1x1_ok(k->aux, sk_store_in(k, 1))
			  ? qg_img_bytes(k->aux, nt)
			  : 0;
	k->t[6] = k->t[5] ? qg_img_row(k->aux) : 0;
	k->scratch = SK_CDIV(qg_scratch_bytes(mt, nt, kp, K, p[27], k->t[5]), 4);
	k->grid = nb * mtiles * ntiles;
}

/* ---- packing ----------------------------------------------------------- */

/* qg_kstep moves an im2col's reduction row (c, kh, kw) to the next one:
 * kw fastest, then kh, then the channel. */
static inline void qg_kstep(int64_t *c, int64_t *kh, int64_t *kw, int64_t KH, int64_t KW)
{
	if (++*kw == KW) {
		*kw = 0;
		if (++*kh == KH) {
			*kh = 0;
			++*c;
		}
	}
}


/* qg_pack_rows_c: rows of float-stored integers to u8 (+ off), K padded to
 * kp with zeros, and each row's sum. */
SK_MV static void qg_pack_rows_c(const float *A, int64_t lda, int64_t rows, int64_t K,
				 int64_t kp, int off, uint8_t *U, int32_t *rsum)
{
	for (int64_t r = 0; r < rows; r++) {
		const float *ar = A + r * lda;
		uint8_t *ur = U + r * kp;
		int32_t s = 0;
		for (int64_t kk = 0; kk < K; kk++) {
			int v = (int)ar[kk] + off;
			ur[kk] = (uint8_t)v;
			s += v;
		}
		for (int64_t kk = K; kk < kp; kk++)
			ur[kk] = 0;
		rsum[r] = s;
	}
}

/* qg_byte is value i of 8-bit integers stored as code (U8 or S8). */
static inline int qg_byte(const void *b, int code, int64_t i)
{
	return code == SK_STORE_U8 ? (int)((const uint8_t *)b)[i] : (int)((const int8_t *)b)[i];
}

/* qg_pack_rows_b: qg_pack_rows_c over rows stored as bytes. */
SK_MV static void qg_pack_rows_b(const void *A, int code, int64_t lda, int64_t rows, int64_t K,
				 int64_t kp, int off, uint8_t *U, int32_t *rsum)
{
	for (int64_t r = 0; r < rows; r++) {
		uint8_t *ur = U + r * kp;
		int32_t s = 0;
		for (int64_t kk = 0; kk < K; kk++) {
			int v = qg_byte(A, code, r * lda + kk) + off;
			ur[kk] = (uint8_t)v;
			s += v;
		}
		for (int64_t kk = K; kk < kp; kk++)
			ur[kk] = 0;
		rsum[r] = s;
	}
}

/* qg_pack_cols_c: columns [0, nl) of integers B (K rows, ld ldb; float32
 * values, code 0, or bytes) to s8 (- off) panels of 16 columns x 4 steps,
 * and column sums. */
static void qg_pack_cols_c(const void *B, int code, int64_t ldb, int64_t K, int64_t nl,
			   int64_t kp, int off, int8_t *S, int32_t *csum)
{
	int64_t k4n = kp / 4, strips = SK_CDIV(nl, 16);
	memset(S, 0, (size_t)(strips * k4n * 64));
	for (int64_t j = 0; j < nl; j++)
		csum[j] = 0;
	for (int64_t kk = 0; kk < K; kk++) {
		int64_t k4 = kk / 4, q = kk % 4;
		for (int64_t j = 0; j < nl; j++) {
			int64_t i = kk * ldb + j;
			int v = (code ? qg_byte(B, code, i) : (int)((const float *)B)[i]) - off;
			S[((j / 16) * k4n + k4) * 64 + (j % 16) * 4 + q] = (int8_t)v;
			csum[j] += v;
		}
	}
}

/* qg_conv_in is the input value output position pos reads at reduction
 * row (c, kh, kw) of a convolution (g: its 16 parameters) over one
 * group's channels at x (float values, code 0, or bytes stored as code),
 * or pad where the window leaves the image. */
static inline int qg_conv_in(const void *x, int code, const int64_t *g, int64_t pos, int64_t c,
			     int64_t kh, int64_t kw, int pad)
{
	int64_t H = g[2], W = g[3], OW = g[15];
	int64_t ih = (pos / OW) * g[8] - g[10] + kh * g[12], iw = (pos % OW) * g[9] - g[11] + kw * g[13];
	if (ih < 0 || ih >= H || iw < 0 || iw >= W)
		return pad;
	int64_t i = (c * H + ih) * W + iw;
	return code ? qg_byte(x, code, i) : (int)((const float *)x)[i];
}

/* qg_pack_im2col_b: the im2col of output positions [n0, n0+nl) of one
 * group (Cg channels at x, stored as bytes) into s8 panels, value by
 * value, padding with pad (where the byte image does not apply). */
static void qg_pack_im2col_b(const void *x, int code, const int64_t *g, int64_t n0, int64_t nl,
			     int64_t K, int64_t kp, int off, float pad, int8_t *S, int32_t *csum)
{
	int64_t KH = g[6], KW = g[7];
	int64_t k4n = kp / 4, strips = SK_CDIV(nl, 16);
	memset(S, 0, (size_t)(strips * k4n * 64));
	for (int64_t j = 0; j < nl; j++)
		csum[j] = 0;
	for (int64_t kk = 0; kk < K; kk++) {
		int64_t c = kk / (KH * KW), kh = (kk / KW) % KH, kw = kk % KW;
		int64_t k4 = kk / 4, q = kk % 4;
		for (int64_t j = 0; j < nl; j++) {
			int v = qg_conv_in(x, code, g, n0 + j, c, kh, kw, (int)pad) - off;
			S[((j / 16) * k4n + k4) * 64 + (j % 16) * 4 + q] = (int8_t)v;
			csum[j] += v;
		}
	}
}

/* ---- positions as rows ----------------------------------------------------
 *
 * A convolution with few output positions (at most 256 an image: the
 * engine's rowsMaxPositions) runs its QGEMM transposed:
 * Y^T = im2col(X)^T x W^T, the output positions as
 * the broadcast rows of the micro-kernel and the output channels along its
 * vectors. Its 16-lane strips then cut channels (a multiple of 16 in every
 * network), not positions (49 positions take 64 lanes); and a block builds
 * only its own positions' rows, where the column form rebuilt one image's
 * whole im2col for each block of channels. The loader packs such a
 * convolution's weights as S panels of output channels (p[27] = 2: in[0]
 * holds W less 128 where W is uint8, as B's panels hold B; in[7] their
 * column sums), each window in (kh, kw, c) order: a position's row is then
 * KH runs of KW * Cg bytes of a channel-last image of the input rows
 * (qg_img_fill_cl), where the (c, kh, kw) order took Cg * KH copies of KW
 * bytes from a channel-major one. Every product and sum is the same
 * integer (the order of an integer sum does not change it), and the
 * epilogue's float steps the same: the same bits as the column form. */

/* qg_rows_im2col_c: the im2col of output positions [p0, p0+pl) of one
 * group of a convolution run transposed, each position's row in
 * (kh, kw, c) order (the channel fastest, as the loader packs such a
 * convolution's weights: rowsConv), as u8 (value + off), K padded to kp
 * with zeros, and each row's sum. */
static void qg_rows_im2col_c(const void *x, int code, const int64_t *g, int64_t p0, int64_t pl,
			     int64_t K, int64_t kp, int off, float pad, uint8_t *U, int32_t *rsum)
{
	int64_t Cg = g[1] / g[5], KH = g[6], KW = g[7];
	for (int64_t r = 0; r < pl; r++) {
		uint8_t *u = U + r * kp;
		int32_t sum = 0;
		int64_t k = 0;
		for (int64_t kh = 0; kh < KH; kh++)
			for (int64_t kw = 0; kw < KW; kw++)
				for (int64_t c = 0; c < Cg; c++, k++) {
					int v = qg_conv_in(x, code, g, p0 + r, c, kh, kw, (int)pad) + off;
					u[k] = (uint8_t)v;
					sum += v;
				}
		memset(u + K, 0, (size_t)(kp - K));
		rsum[r] = sum;
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#define QG_512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

/* qg_load16 is up to 16 8-bit integers stored as code, widened. */
QG_512_TARGET static inline __m512i qg_load16(const void *b, int code, __mmask16 mk)
{
	__m128i v = mk == 0xffff ? _mm_loadu_si128((const __m128i *)b) : _mm_maskz_loadu_epi8(mk, b);
	return code == SK_STORE_U8 ? _mm512_cvtepu8_epi32(v) : _mm512_cvtepi8_epi32(v);
}

/* qg_store16 stores the low bytes of up to 16 int32 values (mk): narrowed
 * in a register, then stored. The narrowing store to memory (vpmovdb
 * m128{k}) stalls on AMD's Zen 4 and 5: in the byte epilogue it took more
 * of the time than the arithmetic. */
QG_512_TARGET static inline void qg_store16(void *y, __mmask16 mk, __m512i v)
{
	__m128i b = _mm512_cvtepi32_epi8(v);
	if (mk == 0xffff)
		_mm_storeu_si128((__m128i *)y, b);
	else
		_mm_mask_storeu_epi8(y, mk, b);
}

/* qg_interleave4 is a panel word of 4 reduction rows of 16 columns:
 * column j's 4 values at bytes 4j..4j+3. */
QG_512_TARGET static inline __m512i qg_interleave4(__m128i v0, __m128i v1, __m128i v2, __m128i v3)
{
	__m128i ab0 = _mm_unpacklo_epi8(v0, v1), ab1 = _mm_unpackhi_epi8(v0, v1);
	__m128i cd0 = _mm_unpacklo_epi8(v2, v3), cd1 = _mm_unpackhi_epi8(v2, v3);
	__m512i word = _mm512_castsi128_si512(_mm_unpacklo_epi16(ab0, cd0));
	word = _mm512_inserti32x4(word, _mm_unpackhi_epi16(ab0, cd0), 1);
	word = _mm512_inserti32x4(word, _mm_unpacklo_epi16(ab1, cd1), 2);
	return _mm512_inserti32x4(word, _mm_unpackhi_epi16(ab1, cd1), 3);
}

/* qg_pack_cols_512: qg_pack_cols_c 16 columns x 4 steps per store, from
 * float32 values (code 0) or bytes. */
QG_512_TARGET static void qg_pack_cols_512(const void *B, int code, int64_t ldb, int64_t K,
					   int64_t nl, int64_t kp, int off, int8_t *S,
					   int32_t *csum)
{
	int64_t k4n = kp / 4, strips = SK_CDIV(nl, 16);
	const __m512i vo = _mm512_set1_epi32(off), m8 = _mm512_set1_epi32(0xff);
	const __m512i ones8 = _mm512_set1_epi8(1), ones16 = _mm512_set1_epi16(1);
	const __m128i vo8 = _mm_set1_epi8((char)off);
	for (int64_t st = 0; st < strips; st++) {
		int64_t j0 = st * 16, w = SK_MIN((int64_t)16, nl - j0);
		__mmask16 mk = (__mmask16)((1u << w) - 1);
		__m512i cs = _mm512_setzero_si512();
		int8_t *sp = S + st * k4n * 64;
		int64_t k4 = 0;
		/* bytes, a whole strip: 4 rows of 16 bytes less off (it wraps
		 * to the truncated difference's byte) interleave into a word */
		if (code && w == 16) {
			const uint8_t *b = (const uint8_t *)B + j0;
			for (; 4 * k4 + 3 < K; k4++) {
				const uint8_t *r = b + 4 * k4 * ldb;
				__m512i word = qg_interleave4(
					_mm_sub_epi8(_mm_loadu_si128((const __m128i *)r), vo8),
					_mm_sub_epi8(_mm_loadu_si128((const __m128i *)(r + ldb)), vo8),
					_mm_sub_epi8(_mm_loadu_si128((const __m128i *)(r + 2 * ldb)), vo8),
					_mm_sub_epi8(_mm_loadu_si128((const __m128i *)(r + 3 * ldb)), vo8));
				_mm512_storeu_si512((void *)(sp + k4 * 64), word);
				cs = _mm512_add_epi32(cs, _mm512_madd_epi16(_mm512_maddubs_epi16(ones8, word), ones16));
			}
		}
		for (; k4 < k4n; k4++) {
			__m512i word = _mm512_setzero_si512();
			for (int q = 0; q < 4; q++) {
				int64_t kk = 4 * k4 + q;
				if (kk >= K)
					break;
				__m512i x = code ? qg_load16((const uint8_t *)B + kk * ldb + j0, code, mk)
						 : _mm512_cvttps_epi32(_mm512_maskz_loadu_ps(
							   mk, (const float *)B + kk * ldb + j0));
				__m512i v = _mm512_maskz_sub_epi32(mk, x, vo);
				cs = _mm512_add_epi32(cs, v);
				word = _mm512_or_si512(word, _mm512_slli_epi32(_mm512_and_si512(v, m8), 8 * q));
			}
			_mm512_storeu_si512((void *)(sp + k4 * 64), word);
		}
		_mm512_mask_storeu_epi32(csum + j0, mk, cs);
	}
}

/* qg_pack_rows_512: qg_pack_rows_c, 16 values per step. */
QG_512_TARGET static void qg_pack_rows_512(const float *A, int64_t lda, int64_t rows,
					   int64_t K, int64_t kp, int off, uint8_t *U,
					   int32_t *rsum)
{
	const __m512i vo = _mm512_set1_epi32(off);
	for (int64_t r = 0; r < rows; r++) {
		const float *ar = A + r * lda;
		uint8_t *ur = U + r * kp;
		__m512i s = _mm512_setzero_si512();
		for (int64_t kk = 0; kk < kp; kk += 16) {
			int64_t w = SK_MIN((int64_t)16, K - kk);
			__mmask16 mk = w <= 0 ? 0 : (__mmask16)((1u << w) - 1);
			__m512i v = _mm512_maskz_add_epi32(mk, _mm512_cvttps_epi32(_mm512_maskz_loadu_ps(mk, ar + kk)), vo);
			s = _mm512_add_epi32(s, v);
			int64_t wk = SK_MIN((int64_t)16, kp - kk);
			qg_store16(ur + kk, (__mmask16)((1u << wk) - 1), v);
		}
		rsum[r] = _mm512_reduce_add_epi32(s);
	}
}

/* qg_img_rows is the input rows that output positions [n0, n0+nl) of a
 * convolution (g: its parameters) read, the first of them *iha (it may
 * lie in the padding): the rows of the byte images. */
static inline int64_t qg_img_rows(const int64_t *g, int64_t n0, int64_t nl, int64_t *iha)
{
	int64_t KH = g[6], SH = g[8], PT = g[10], DH = g[12], OW = g[15];
	int64_t oha = n0 / OW, ohb = (n0 + nl - 1) / OW;
	*iha = oha * SH - PT;
	return (ohb - oha) * SH + (KH - 1) * DH + 1;
}

/* qg_img_fill converts the input rows that output positions [n0, n0+nl)
 * read, of the Cg channels of one group at x, to s8 (value - off) in img
 * (rows of L bytes, column -PL first, padding as pad - off); it returns the
 * rows per channel. */
QG_512_TARGET static int64_t qg_img_fill(const float *x, int code, const int64_t *g, int64_t n0,
					 int64_t nl, int off, float pad, int64_t L, int8_t *img)
{
	int64_t Cg = g[1] / g[5], H = g[2], W = g[3], PL = g[11], iha;
	int64_t rows = qg_img_rows(g, n0, nl, &iha);
	int8_t padb = (int8_t)((int)pad - off);
	const __m512i vo = _mm512_set1_epi32(off), vo8 = _mm512_set1_epi8((char)off);
	const uint8_t *xend = (const uint8_t *)x + Cg * H * W;
	const __m512i vpad = _mm512_set1_epi8((char)padb);
	for (int64_t c = 0; c < Cg; c++) {
		for (int64_t r = 0; r < rows; r++) {
			int8_t *d = img + QG_IMG_FRONT + (c * rows + r) * L;
			int64_t ih = iha + r;
			if (ih < 0 || ih >= H) {
				for (int64_t j = 0; j < L; j += 64)
					_mm512_storeu_si512((void *)(d + j), vpad);
				continue;
			}
			const float *xr = x + (c * H + ih) * W;
			const uint8_t *xb = (const uint8_t *)x + (c * H + ih) * W;
			if (code) {
				/* bytes: v - off wraps to the same byte as the
				 * truncated int32 difference, 64 at a time. Whole
				 * stores: the padding's first, then the row's, then
				 * the padding after it; a store past the row's end
				 * lands on the next row, written after it, or on
				 * QG_IMG_BACK (with masked stores and memset calls
				 * this routine took 1.3-1.7x the samples on Zen 5) */
				for (int64_t j = 0; j < PL; j += 64)
					_mm512_storeu_si512((void *)(d + j), vpad);
				for (int64_t j = 0; j < W; j += 64) {
					__mmask64 mk = W - j >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (W - j)) - 1;
					/* a whole load where the group's bytes go on past
					 * it (the bytes past the row, of the next, are
					 * overwritten): a masked byte load cost 9 in 10 of
					 * this routine's time on Zen 5 */
					__m512i raw = xb + j + 64 <= xend ? _mm512_loadu_si512((const void *)(xb + j))
									  : _mm512_maskz_loadu_epi8(mk, xb + j);
					_mm512_storeu_si512((void *)(d + PL + j), _mm512_sub_epi8(raw, vo8));
				}
				for (int64_t j = PL + W; j < L; j += 64)
					_mm512_storeu_si512((void *)(d + j), vpad);
				continue;
			}
			memset(d, padb, (size_t)PL);
			for (int64_t j = 0; !code && j < W; j += 16) {
				__mmask16 mk = (__mmask16)(W - j >= 16 ? 0xffff : (1u << (W - j)) - 1);
				__m512i v = _mm512_sub_epi32(_mm512_cvttps_epi32(_mm512_maskz_loadu_ps(mk, xr + j)), vo);
				qg_store16(d + PL + j, mk, v);
			}
			memset(d + PL + W, padb, (size_t)(L - PL - W));
		}
	}
	return rows;
}

/* qg_pack_im2col_img: qg_pack_im2col_512 from the byte image that
 * qg_img_fill made (rows per channel, L bytes a row): every value of a
 * strip's lanes that lie in one output row sits at a fixed offset and
 * stride (1 or 2) in the image, so a reduction row is one 16-byte load per
 * output row the strip spans (two and a narrowing for stride 2), and 4
 * reduction rows interleave into one panel word. */
QG_512_TARGET static void qg_pack_im2col_img(const int64_t *g, int64_t n0, int64_t nl, int64_t K,
					     int64_t kp, const int8_t *img, int64_t rows, int64_t L,
					     int32_t *koff, int8_t *S, int32_t *csum)
{
	int64_t KH = g[6], KW = g[7], SH = g[8], SW = g[9], PT = g[10], DH = g[12], DW = g[13];
	int64_t OW = g[15];
	int64_t k4n = kp / 4, strips = SK_CDIV(nl, 16), iha = (n0 / OW) * SH - PT;
	const __m512i ones8 = _mm512_set1_epi8(1), ones16 = _mm512_set1_epi16(1);
	img += QG_IMG_FRONT;
	/* each reduction row's offset in the image, once for all strips
	 * where there are several (with one or two, counting (c, kh, kw)
	 * along is cheaper than the table) */
	if (strips < 4)
		koff = NULL;
	for (int64_t k = 0, c = 0, kh = 0, kw = 0; koff && k < K; k++) {
		koff[k] = (int32_t)((c * rows + kh * DH) * L + kw * DW);
		qg_kstep(&c, &kh, &kw, KH, KW);
	}
	for (int64_t st = 0; st < strips; st++) {
		int64_t j0 = st * 16, w = SK_MIN((int64_t)16, nl - j0);
		/* the strip's output rows: lanes, and lane 0's offset in the
		 * image for c = kh = kw = 0 (lane j reads SW * j further) */
		__mmask16 lanes[17];
		int64_t rel[17];
		int nseg = 0;
		for (int64_t j = 0; j < w;) {
			int64_t p = n0 + j0 + j, oh = p / OW, ow = p % OW, len = SK_MIN(w - j, OW - ow);
			lanes[nseg] = (__mmask16)(((1u << len) - 1) << j);
			rel[nseg] = (oh * SH - PT - iha) * L + (ow - j) * SW;
			nseg++;
			j += len;
		}
		int whole = nseg == 1 && w == 16;
		__m512i cs = _mm512_setzero_si512();
		int8_t *sp = S + st * k4n * 64;
		int64_t c = 0, kh = 0, kw = 0, k4 = 0;
		/* a strip within one output row: 4 loads a panel word, from the
		 * offsets' table (whole groups of 4 reduction rows) */
		if (whole && koff) {
			const int8_t *b = img + rel[0];
			for (; 4 * k4 + 3 < K; k4++) {
				const int32_t *o = koff + 4 * k4;
				__m512i word;
				if (SW == 1)
					word = qg_interleave4(_mm_loadu_si128((const __m128i *)(b + o[0])),
							      _mm_loadu_si128((const __m128i *)(b + o[1])),
							      _mm_loadu_si128((const __m128i *)(b + o[2])),
							      _mm_loadu_si128((const __m128i *)(b + o[3])));
				else
					word = qg_interleave4(
						_mm256_cvtepi16_epi8(_mm256_loadu_si256((const __m256i *)(b + o[0]))),
						_mm256_cvtepi16_epi8(_mm256_loadu_si256((const __m256i *)(b + o[1]))),
						_mm256_cvtepi16_epi8(_mm256_loadu_si256((const __m256i *)(b + o[2]))),
						_mm256_cvtepi16_epi8(_mm256_loadu_si256((const __m256i *)(b + o[3]))));
				_mm512_storeu_si512((void *)(sp + k4 * 64), word);
				cs = _mm512_add_epi32(cs, _mm512_madd_epi16(_mm512_maddubs_epi16(ones8, word), ones16));
			}
		} else if (nseg == 2 && w == 16 && koff) {
			/* a whole strip across two output rows: each value of a
			 * panel word from two loads, the second row's lanes
			 * (lanes[1]) from the second (on 56x56 outputs, about
			 * one strip in four; on 28x28, one in two) */
			const int8_t *b0 = img + rel[0], *b1 = img + rel[1];
			__mmask16 m1 = lanes[1];
			for (; 4 * k4 + 3 < K; k4++) {
				const int32_t *o = koff + 4 * k4;
				__m128i v4[4];
				for (int q = 0; q < 4; q++)
					v4[q] = SW == 1 ? _mm_mask_mov_epi8(
							  _mm_loadu_si128((const __m128i *)(b0 + o[q])), m1,
							  _mm_loadu_si128((const __m128i *)(b1 + o[q])))
							: _mm_mask_mov_epi8(
							  _mm256_cvtepi16_epi8(_mm256_loadu_si256((const __m256i *)(b0 + o[q]))),
							  m1,
							  _mm256_cvtepi16_epi8(_mm256_loadu_si256((const __m256i *)(b1 + o[q]))));
				__m512i word = qg_interleave4(v4[0], v4[1], v4[2], v4[3]);
				_mm512_storeu_si512((void *)(sp + k4 * 64), word);
				cs = _mm512_add_epi32(cs, _mm512_madd_epi16(_mm512_maddubs_epi16(ones8, word), ones16));
			}
		}
		for (; k4 < k4n; k4++) {
			__m128i v[4];
			for (int q = 0; q < 4; q++) {
				if (4 * k4 + q >= K) {
					v[q] = _mm_setzero_si128();
					continue;
				}
				const int8_t *b = img + (koff ? koff[4 * k4 + q] : (c * rows + kh * DH) * L + kw * DW);
				if (!koff)
					qg_kstep(&c, &kh, &kw, KH, KW);
				if (whole) {
					v[q] = SW == 1 ? _mm_loadu_si128((const __m128i *)(b + rel[0]))
						       : _mm256_cvtepi16_epi8(_mm256_loadu_si256((const __m256i *)(b + rel[0])));
				} else {
					v[q] = _mm_setzero_si128();
					for (int s = 0; s < nseg; s++) {
						__m128i r = SW == 1 ? _mm_loadu_si128((const __m128i *)(b + rel[s]))
								    : _mm256_cvtepi16_epi8(_mm256_loadu_si256(
									      (const __m256i *)(b + rel[s])));
						v[q] = _mm_mask_mov_epi8(v[q], lanes[s], r);
					}
				}
			}
			__m512i word = qg_interleave4(v[0], v[1], v[2], v[3]);
			_mm512_storeu_si512((void *)(sp + k4 * 64), word);
			/* each column's 4 values summed (byte pairs, then pairs) */
			cs = _mm512_add_epi32(cs, _mm512_madd_epi16(_mm512_maddubs_epi16(ones8, word), ones16));
		}
		_mm512_mask_storeu_epi32(csum + j0, (__mmask16)((1u << w) - 1), cs);
	}
}

/* qg_pack_im2col_512: the im2col of output positions [n0, n0+nl) of one
 * group (Cg channels at x) straight into s8 panels (no float tile): each
 * 16-position strip gathers its 16 values of a reduction row (masked:
 * padding reads pad), 4 rows make one 64-byte store. g: the 16
 * convolution parameters. */
QG_512_TARGET static void qg_pack_im2col_512(const float *x, const int64_t *g, int64_t n0,
					     int64_t nl, int64_t K, int64_t kp, int off,
					     float pad, int8_t *S, int32_t *csum)
{
	int64_t H = g[2], W = g[3], KH = g[6], KW = g[7], SH = g[8], SW = g[9];
	int64_t PT = g[10], PL = g[11], DH = g[12], DW = g[13], OW = g[15];
	int64_t k4n = kp / 4, strips = SK_CDIV(nl, 16);
	const __m512i vo = _mm512_set1_epi32(off), m8 = _mm512_set1_epi32(0xff);
	const __m512i vH = _mm512_set1_epi32((int)H), vW = _mm512_set1_epi32((int)W);
	const __m512 vpad = _mm512_set1_ps(pad);
	for (int64_t st = 0; st < strips; st++) {
		int64_t j0 = st * 16, w = SK_MIN((int64_t)16, nl - j0);
		__mmask16 live = (__mmask16)((1u << w) - 1);
		int32_t h0[16], w0[16];
		for (int j = 0; j < 16; j++) {
			int64_t p = n0 + j0 + SK_MIN((int64_t)j, w - 1);
			h0[j] = (int32_t)((p / OW) * SH - PT);
			w0[j] = (int32_t)((p % OW) * SW - PL);
		}
		__m512i bh = _mm512_loadu_si512(h0), bw = _mm512_loadu_si512(w0);
		__m512i cs = _mm512_setzero_si512();
		int8_t *sp = S + st * k4n * 64;
		/* reduction row k = (c, kh, kw), counted up without divisions */
		int64_t c = 0, kh = 0, kw = 0;
		for (int64_t k4 = 0; k4 < k4n; k4++) {
			__m512i word = _mm512_setzero_si512();
			for (int q = 0; q < 4; q++) {
				int64_t k = 4 * k4 + q;
				if (k >= K)
					break;
				__m512i ih = _mm512_add_epi32(bh, _mm512_set1_epi32((int)(kh * DH)));
				__m512i iw = _mm512_add_epi32(bw, _mm512_set1_epi32((int)(kw * DW)));
				__mmask16 in = live &
					_mm512_cmpge_epi32_mask(ih, _mm512_setzero_si512()) &
					_mm512_cmplt_epi32_mask(ih, vH) &
					_mm512_cmpge_epi32_mask(iw, _mm512_setzero_si512()) &
					_mm512_cmplt_epi32_mask(iw, vW);
				__m512i idx = _mm512_add_epi32(_mm512_mullo_epi32(ih, vW), iw);
				__m512 f = _mm512_mask_i32gather_ps(vpad, in, idx, x + c * H * W, 4);
				__m512i v = _mm512_maskz_sub_epi32(live, _mm512_cvttps_epi32(f), vo);
				cs = _mm512_add_epi32(cs, v);
				word = _mm512_or_si512(word, _mm512_slli_epi32(_mm512_and_si512(v, m8), 8 * q));
				qg_kstep(&c, &kh, &kw, KH, KW);
			}
			_mm512_storeu_si512((void *)(sp + k4 * 64), word);
		}
		_mm512_mask_storeu_epi32(csum + j0, live, cs);
	}
}

/* qg_tr16x16 transposes 16 rows of 16 bytes with 4 stages of
 * interleaving: afterwards r[qg_rev4[j]] holds column j, its bytes in
 * row order (the stages leave the columns in bit-reversed order). */
static const uint8_t qg_rev4[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};

QG_512_TARGET static inline void qg_tr16x16(__m128i r[16])
{
	__m128i t[16];
	for (int i = 0; i < 8; i++) {
		t[i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
		t[i + 8] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
	}
	for (int i = 0; i < 8; i++) {
		r[i] = _mm_unpacklo_epi16(t[2 * i], t[2 * i + 1]);
		r[i + 8] = _mm_unpackhi_epi16(t[2 * i], t[2 * i + 1]);
	}
	for (int i = 0; i < 8; i++) {
		t[i] = _mm_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
		t[i + 8] = _mm_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
	}
	for (int i = 0; i < 8; i++) {
		r[i] = _mm_unpacklo_epi64(t[2 * i], t[2 * i + 1]);
		r[i + 8] = _mm_unpackhi_epi64(t[2 * i], t[2 * i + 1]);
	}
}

/* qg_img_fill_cl is qg_img_fill channel-last, for the transposed form:
 * the input rows that output positions [n0, n0+nl) read, of the Cg
 * channels of one group at x, as s8 (value - off), column -PL first,
 * padding as pad - off; byte (r * L + j) * Cg + c after QG_IMG_FRONT is
 * channel c of the block's input row r at column j - PL. 16 channels by
 * 16 columns are transposed at a time. */
QG_512_TARGET static void qg_img_fill_cl(const float *x, int code, const int64_t *g, int64_t n0,
					    int64_t nl, int off, float pad, int64_t L, int8_t *img)
{
	int64_t Cg = g[1] / g[5], H = g[2], W = g[3], PL = g[11], iha;
	int64_t rows = qg_img_rows(g, n0, nl, &iha);
	int8_t padb = (int8_t)((int)pad - off);
	const __m128i vo8 = _mm_set1_epi8((char)off);
	const __m512i vo = _mm512_set1_epi32(off);
	/* whole loads where the group's bytes go on past them (qg_img_fill) */
	const uint8_t *xend = (const uint8_t *)x + Cg * H * W;
	img += QG_IMG_FRONT;
	for (int64_t r = 0; r < rows; r++) {
		int8_t *d = img + r * L * Cg;
		int64_t ih = iha + r;
		if (ih < 0 || ih >= H) {
			memset(d, padb, (size_t)(L * Cg));
			continue;
		}
		memset(d, padb, (size_t)(PL * Cg));
		memset(d + (PL + W) * Cg, padb, (size_t)((L - PL - W) * Cg));
		for (int64_t c0 = 0; c0 < Cg; c0 += 16) {
			int nc = (int)SK_MIN((int64_t)16, Cg - c0);
			__mmask16 cm = (__mmask16)((1u << nc) - 1);
			for (int64_t w0 = 0; w0 < W; w0 += 16) {
				int nw = (int)SK_MIN((int64_t)16, W - w0);
				__mmask16 wm = (__mmask16)((1u << nw) - 1);
				__m128i t[16];
				for (int i = 0; i < 16; i++) {
					int64_t o = ((c0 + i) * H + ih) * W + w0;
					if (i >= nc)
						t[i] = _mm_setzero_si128();
					else if (code) /* v - off wraps to the truncated difference's byte */
						t[i] = _mm_sub_epi8(
							(const uint8_t *)x + o + 16 <= xend
								? _mm_loadu_si128((const __m128i *)((const uint8_t *)x + o))
								: _mm_maskz_loadu_epi8(wm, (const uint8_t *)x + o),
							vo8);
					else
						t[i] = _mm512_cvtepi32_epi8(_mm512_sub_epi32(
							_mm512_cvttps_epi32(_mm512_maskz_loadu_ps(wm, x + o)), vo));
				}
				qg_tr16x16(t);
				for (int j = 0; j < nw; j++) {
					int8_t *dst = d + (PL + w0 + j) * Cg + c0;
					if (nc == 16)
						_mm_storeu_si128((__m128i *)dst, t[qg_rev4[j]]);
					else
						_mm_mask_storeu_epi8(dst, cm, t[qg_rev4[j]]);
				}
			}
		}
	}
}

/* qg_rows_im2col_cl: qg_rows_im2col_c from the channel-last image
 * qg_img_fill_cl made (value + off already, L columns a row): a kernel
 * row's KW columns of all channels are one copy of KW * Cg bytes (KW
 * copies of Cg where dilated). The row sums are vpsadbw's. */
QG_512_TARGET static void qg_rows_im2col_cl(const int64_t *g, int64_t p0, int64_t pl, int64_t K,
					    int64_t kp, const int8_t *img, int64_t L, uint8_t *U,
					    int32_t *rsum)
{
	int64_t Cg = g[1] / g[5], KH = g[6], KW = g[7], SH = g[8], SW = g[9], PT = g[10];
	int64_t DH = g[12], DW = g[13], OW = g[15];
	int64_t iha = (p0 / OW) * SH - PT;
	img += QG_IMG_FRONT;
	const __m512i zero = _mm512_setzero_si512();
	for (int64_t r = 0; r < pl; r++) {
		int64_t pos = p0 + r, oh = pos / OW, ow = pos % OW, k = 0;
		uint8_t *u = U + r * kp;
		for (int64_t kh = 0; kh < KH; kh++) {
			const int8_t *src = img + ((oh * SH - PT - iha + kh * DH) * L + ow * SW) * Cg;
			if (DW == 1) {
				memcpy(u + k, src, (size_t)(KW * Cg));
				k += KW * Cg;
			} else {
				for (int64_t kw = 0; kw < KW; kw++, k += Cg)
					memcpy(u + k, src + kw * DW * Cg, (size_t)Cg);
			}
		}
		memset(u + K, 0, (size_t)(kp - K));
		__m512i sum = zero;
		for (int64_t j = 0; j < kp; j += 64) {
			__m512i v = kp - j >= 64 ? _mm512_loadu_si512((const void *)(u + j))
						 : _mm512_maskz_loadu_epi8(sk_bytes64(j, kp), u + j);
			sum = _mm512_add_epi64(sum, _mm512_sad_epu8(v, zero));
		}
		rsum[r] = (int32_t)_mm512_reduce_add_epi64(sum);
	}
}

#else
#define qg_img_fill(...) ((int64_t)0)
#define qg_img_fill_cl(...) ((void)0)
#define qg_rows_im2col_cl(...) ((void)0)
#define qg_pack_im2col_img(...) ((void)0)
#define qg_pack_rows_512(...) ((void)0)
#define qg_pack_cols_512(...) ((void)0)
#define qg_pack_im2col_512(...) ((void)0)
#endif

/* qg_gather_1x1_c copies the bytes that positions [n0, n0+nl) of an
 * unpadded 1x1 convolution (c: its parameters) read from x (a group's K
 * channels) to col, channel k's at col + k * nl. */
static void qg_gather_1x1_c(const uint8_t *x, const int64_t *c, int64_t n0, int64_t nl, int64_t K,
			    uint8_t *col)
{
	int64_t H = c[2], W = c[3], SH = c[8], SW = c[9], OW = c[15];
	for (int64_t k = 0; k < K; k++) {
		const uint8_t *xk = x + k * H * W;
		uint8_t *d = col + k * nl;
		for (int64_t j = 0; j < nl; j++) {
			int64_t n = n0 + j;
			d[j] = xk[(n / OW) * SH * W + (n % OW) * SW];
		}
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
/* qg_gather_1x1_512: qg_gather_1x1_c, at column stride 2 up to 16 bytes of
 * an output row a step: 32 bytes loaded (masked to the last one read) as
 * 16 words, narrowed to their low (even) bytes. QG_GATHER_MAX bounds the
 * positions (a block's nt is at most 256), whose steps are worked out
 * once for all the channels. */
#define QG_GATHER_MAX 256
QG_512_TARGET static void qg_gather_1x1_512(const uint8_t *x, const int64_t *c, int64_t n0,
					    int64_t nl, int64_t K, uint8_t *col)
{
	int64_t H = c[2], W = c[3], SH = c[8], SW = c[9], OW = c[15];
	if (SW != 2 || nl > QG_GATHER_MAX) {
		qg_gather_1x1_c(x, c, n0, nl, K, col);
		return;
	}
	/* the positions' runs along output rows, split in steps of 16: where
	 * each reads and writes, and its masks (the same for every channel) */
	int32_t so[QG_GATHER_MAX + 16], dof[QG_GATHER_MAX + 16];
	__mmask32 lm[QG_GATHER_MAX + 16];
	__mmask16 sm[QG_GATHER_MAX + 16];
	int ns = 0;
	for (int64_t n = n0; n < n0 + nl;) {
		int64_t oh = n / OW, ow = n % OW, cnt = SK_MIN(OW - ow, n0 + nl - n);
		for (int64_t i = 0; i < cnt; i += 16, ns++) {
			int64_t m = SK_MIN((int64_t)16, cnt - i); /* bytes out; 2m - 1 read */
			so[ns] = (int32_t)(oh * SH * W + 2 * (ow + i));
			dof[ns] = (int32_t)(n - n0 + i);
			lm[ns] = m == 16 ? ~(__mmask32)0 : (((__mmask32)1 << (2 * m - 1)) - 1);
			sm[ns] = (__mmask16)((1u << m) - 1);
		}
		n += cnt;
	}
	/* whole loads where the group's bytes go on past them (qg_img_fill) */
	const uint8_t *xend = x + K * H * W;
	for (int64_t k = 0; k < K; k++) {
		const uint8_t *xk = x + k * H * W;
		uint8_t *d = col + k * nl;
		for (int i = 0; i < ns; i++) {
			const uint8_t *src = xk + so[i];
			__m256i raw = src + 32 <= xend ? _mm256_loadu_si256((const __m256i *)src)
						       : _mm256_maskz_loadu_epi8(lm[i], src);
			_mm_mask_storeu_epi8(d + dof[i], sm[i], _mm256_cvtepi16_epi8(raw));
		}
	}
}
#endif

/* qg_gather_1x1: AVX-512 (wide) or portable. */
static void qg_gather_1x1(int wide, const uint8_t *x, const int64_t *c, int64_t n0, int64_t nl,
			  int64_t K, uint8_t *col)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (wide) {
		qg_gather_1x1_512(x, c, n0, nl, K, col);
		return;
	}
#endif
	(void)wide;
	qg_gather_1x1_c(x, c, n0, nl, K, col);
}

/* qg_pack_rows / qg_pack_cols: AVX-512 (wide) or portable packing. */
static void qg_pack_rows(int wide, const float *A, int64_t lda, int64_t rows, int64_t K,
			 int64_t kp, int off, uint8_t *U, int32_t *rsum)
{
	if (wide)
		qg_pack_rows_512(A, lda, rows, K, kp, off, U, rsum);
	else
		qg_pack_rows_c(A, lda, rows, K, kp, off, U, rsum);
}

static void qg_pack_cols(int wide, const void *B, int code, int64_t ldb, int64_t K, int64_t nl,
			 int64_t kp, int off, int8_t *S, int32_t *csum)
{
	if (wide)
		qg_pack_cols_512(B, code, ldb, K, nl, kp, off, S, csum);
	else
		qg_pack_cols_c(B, code, ldb, K, nl, kp, off, S, csum);
}

/* ---- epilogue ------------------------------------------------------------ */

/* QG_MV512 builds a function for AVX-512 too (the epilogue: 16 lanes of
 * integer and float arithmetic, rint included). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define QG_MV512 __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define QG_MV512
#endif

/* One row of a tile: the per-column terms are arrays (sb, cs, bias, mult
 * over the tile's columns), the per-row ones scalars. */
typedef struct qg_row {
	int32_t rs, ua, brow;
	int32_t rt; /* qg_epilogue_b512 with ecol: the row's integer terms */
	float mrow, zy, lo, hi;
	int requant;
} qg_row;

/* qg_rows: where a row group's per-row terms come from (sk_block_qgemm's
 * parameters): row r of the group is row m = m0 + r of the output. */
typedef struct qg_rows {
	const int32_t *rs;   /* the rows' sums of U, from the group's first */
	const float *za;     /* A's zero points (NULL: 0), per row when zrow */
	const int32_t *bias; /* per row when bmode == 1 */
	const float *mult;   /* one (mmode 1) or per row (mmode 2) */
	int64_t roff, m0;    /* the batch item's row offset; the first row */
	int32_t aoff, sb0;   /* U's offset; column 0's B zero point term */
	int zrow, bmode, mmode;
} qg_rows;

/* qg_row_terms sets row's per-row terms for row r of group g. */
static inline void qg_row_terms(const qg_rows *g, int r, qg_row *row)
{
	int64_t m = g->m0 + r;
	row->rs = g->rs[r];
	row->ua = (int32_t)(g->za ? g->za[g->zrow ? g->roff + m : 0] : 0.0f) + g->aoff;
	row->brow = g->bmode == 1 ? g->bias[g->roff + m] : 0;
	row->mrow = g->mmode == 1 ? g->mult[0] : (g->mmode == 2 ? g->mult[g->roff + m] : 1.0f);
	row->rt = row->brow - g->sb0 * row->rs;
}

QG_MV512 static void qg_epilogue(const int32_t *acc, int64_t w, const int32_t *sb,
			      const int32_t *cs, const int32_t *bcol, const float *mcol,
			      int32_t K, qg_row r, float *y)
{
	if (!r.requant) {
		for (int64_t j = 0; j < w; j++)
			y[j] = (float)(acc[j] - sb[j] * r.rs - r.ua * cs[j] + K * r.ua * sb[j] +
				       r.brow + bcol[j]);
		return;
	}
	for (int64_t j = 0; j < w; j++) {
		int32_t v = acc[j] - sb[j] * r.rs - r.ua * cs[j] + K * r.ua * sb[j] + r.brow + bcol[j];
		float f = rintf((float)v * r.mrow * mcol[j]) + r.zy;
		y[j] = f < r.lo ? r.lo : (f > r.hi ? r.hi : f);
	}
}

/* qg_epilogue_b: qg_epilogue's requantised row stored as bytes (code). */
QG_MV512 static void qg_epilogue_b(const int32_t *acc, int64_t w, const int32_t *sb,
				const int32_t *cs, const int32_t *bcol, const float *mcol,
				int32_t K, qg_row r, int code, void *y)
{
	float f[256];
	for (int64_t j0 = 0; j0 < w; j0 += 256) {
		int64_t n = SK_MIN((int64_t)256, w - j0);
		qg_epilogue(acc + j0, n, sb + j0, cs + j0, bcol + j0, mcol + j0, K, r, f);
		sk_store_save(f, code, n, (uint8_t *)y + j0);
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
/* qg_epilogue_b512: qg_epilogue_b 16 columns at a time. The integer sum
 * is regrouped (exact: integers): with per-tensor zero points (ecol set)
 * it is acc + ecol[j] + r.rt, ecol holding each column's terms and r.rt
 * the row's. The float steps keep qg_epilogue's order (v * mrow, then
 * * mcol unless every mcol is 1 (mc = 0): exact, rint, + zy, clamp); a
 * clamped value fits the code's byte, whose two's complement the
 * truncating store keeps. */
QG_512_TARGET static inline void qg_epilogue_b512(const int32_t *acc, int64_t w, const int32_t *sb,
						  const int32_t *cs, const int32_t *bcol,
						  const float *mcol, int32_t K, qg_row r,
						  const int32_t *ecol, int mc, uint8_t *y)
{
	const __m512i t = _mm512_set1_epi32(K * r.ua - r.rs), ua = _mm512_set1_epi32(r.ua);
	const __m512i brow = _mm512_set1_epi32(r.brow), rt = _mm512_set1_epi32(r.rt);
	const __m512 mrow = _mm512_set1_ps(r.mrow);
	__m512i zy;
	__m512 lo, hi;
	qg_req_bounds(r.zy, r.lo, r.hi, &zy, &lo, &hi);
	for (int64_t j = 0; j < w; j += 16) {
		__mmask16 mk = (__mmask16)(w - j >= 16 ? 0xffff : (1u << (w - j)) - 1);
		__m512i v = qg_ld32(mk, acc + j);
		if (ecol) {
			v = _mm512_add_epi32(v, _mm512_add_epi32(qg_ld32(mk, ecol + j), rt));
		} else {
			v = _mm512_add_epi32(v, _mm512_mullo_epi32(qg_ld32(mk, sb + j), t));
			v = _mm512_sub_epi32(v, _mm512_mullo_epi32(qg_ld32(mk, cs + j), ua));
			v = _mm512_add_epi32(v, _mm512_add_epi32(brow, qg_ld32(mk, bcol + j)));
		}
		__m512 m = mc ? qg_ldps(mk, mcol + j) : mrow;
		qg_store16(y + j, mk, qg_req16(v, mrow, mc, m, zy, lo, hi));
	}
}

/* qg_epilogue_rows_b512: qg_epilogue_b512 for each of a row group's
 * rows (one call for the group: the row terms are set up here, in the
 * epilogue's own target, not argument by argument for each row). */
QG_512_TARGET static void qg_epilogue_rows_b512(const int32_t *acc, int64_t lacc, int rows,
						 int64_t w, const int32_t *sb, const int32_t *cs,
						 const int32_t *bcol, const float *mcol, int32_t K,
						 qg_row row, const qg_rows *g, const int32_t *ecol,
						 int mc, uint8_t *y, int64_t ldc)
{
	for (int r = 0; r < rows; r++) {
		qg_row_terms(g, r, &row);
		qg_epilogue_b512(acc + r * lacc, w, sb, cs, bcol, mcol, K, row, ecol, mc, y + (g->m0 + r) * ldc);
	}
}

/* qg_epilogue_rows_b512t: qg_epilogue_b512 for the rows (output
 * positions) of a transposed tile, each row's terms in rw, stored
 * transposed: column j's bytes of rows 0.. at y + j * ldc onwards. */
QG_512_TARGET static void qg_epilogue_rows_b512t(const int32_t *acc, int64_t lacc, int rows,
						  int64_t w, const int32_t *sb, const int32_t *cs,
						  const int32_t *bcol, const float *mcol, int32_t K,
						  const qg_row *rw, const int32_t *ecol, int mc,
						  uint8_t *y, int64_t ldc)
{
	uint8_t t[QG_MR][64];
	for (int r = 0; r < rows; r++)
		qg_epilogue_b512(acc + r * lacc, w, sb, cs, bcol, mcol, K, rw[r], ecol, mc, t[r]);
	if (rows == 4) {
		for (int64_t j = 0; j < w; j++) {
			uint32_t v = (uint32_t)t[0][j] | (uint32_t)t[1][j] << 8 | (uint32_t)t[2][j] << 16 |
				     (uint32_t)t[3][j] << 24;
			memcpy(y + j * ldc, &v, 4);
		}
		return;
	}
	for (int64_t j = 0; j < w; j++)
		for (int r = 0; r < rows; r++)
			y[j * ldc + r] = t[r][j];
}

#else
#define qg_epilogue_rows_b512(...) ((void)0)
#define qg_epilogue_rows_b512t(...) ((void)0)
#endif

/* qg_block_rows: one block of a convolution's QGEMM run transposed
 * (p[27] = 2): output positions [p0, p0+pl) of one image and group as
 * rows, output channels [c0, c0+cl) as columns, the weights' S panels
 * (in[0]) read in place. In the kernel's terms (sluice_cpu.h) A's rows are
 * the channels and B's columns the positions, so here the row terms come
 * from B's parameters and the column terms from A's. */
static void qg_block_rows(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	const int64_t *p = k->p, *c = k->aux;
	int64_t M = p[0], N = p[1], K = p[2], ldc = p[5];
	int64_t pt = k->t[0], ct = k->t[1], ptiles = k->t[2], ctiles = k->t[3], kp = k->t[4];
	int64_t ci = blk % ctiles, pi = (blk / ctiles) % ptiles, b = blk / (ctiles * ptiles);
	int64_t b2 = b % p[7], b1 = b / p[7];
	int64_t p0 = pi * pt, pl = SK_MIN(pt, N - p0), c0 = ci * ct, cl = SK_MIN(ct, M - c0);
	int64_t strips = SK_CDIV(cl, 16), k4n = kp / 4;
	int64_t roff = b1 * p[14] + b2 * p[15]; /* per-row parameters */
	int sx = sk_store_in(k, 1), sy = sk_store_out(k);
	float *Y = k->out + (sy ? 0 : b1 * p[12] + b2 * p[13]);
	uint8_t *Yb = (uint8_t *)k->out + (sy ? b1 * p[12] + b2 * p[13] : 0);
	int aoffw = p[16] ? 128 : 0, aoffx = p[17] ? 128 : 0;

	uint8_t *base = (uint8_t *)sk_scratch(ctx, SK_CDIV(qg_rows_scratch_bytes(pt, ct, kp, k->t[5]), 4));
	if (!base)
		return;
	int32_t *rsum = (int32_t *)base;
	int32_t *acc = rsum + pt;
	int64_t lacc = SK_CDIV(ct, QG_NR) * QG_NR;
	int32_t *sbv = acc + QG_MR * lacc, *bcol = sbv + ct;
	float *mcol = (float *)(bcol + ct);
	uint8_t *U = (uint8_t *)(mcol + ct);
	U = (uint8_t *)(((uintptr_t)U + 63) & ~(uintptr_t)63);
	int8_t *img = (int8_t *)(U + pt * kp);
	qg_impl q = qg_choose(kp);

	/* the positions' im2col rows, x + aoffx as u8 */
	int64_t Cg = c[1] / c[5];
	int64_t xo = (b1 * c[1] + b2 * Cg) * c[2] * c[3];
	const float *xg = (const float *)sk_elem(k->in[1], sx, xo);
	if (k->t[5] && q.pack512) {
		qg_img_fill_cl(xg, sx, c, p0, pl, -aoffx, k->f[1], k->t[6], img);
		SK_POLL(ctx);
		qg_rows_im2col_cl(c, p0, pl, K, kp, img, k->t[6], U, rsum);
	} else {
		qg_rows_im2col_c(xg, sx, c, p0, pl, K, kp, aoffx, k->f[1], U, rsum);
	}
	SK_POLL(ctx);

	/* the tile's per-column terms, from A's (the weights') parameters:
	 * the panels hold W - (128 - aoffw) */
	const float *za = k->in[2], *zb = k->in[3], *mult = k->in[4];
	const int32_t *bias = (const int32_t *)k->in[5];
	const int32_t *cs = (const int32_t *)k->in[7] + c0;
	for (int64_t j = 0; j < cl; j++) {
		int64_t m = roff + c0 + j;
		sbv[j] = (int32_t)(za ? za[p[18] ? m : 0] : 0.0f) + aoffw - 128;
		bcol[j] = p[21] == 1 ? bias[m] : 0;
		mcol[j] = p[20] == 2 ? mult[m] : 1.0f;
	}
	/* and per row, from B's (the input's): one zero point */
	qg_row row = {.zy = k->f[0], .lo = (float)p[23], .hi = (float)p[24], .requant = (int)p[22]};
	row.ua = (int32_t)(zb ? zb[0] : 0.0f) + aoffx;
	row.mrow = p[20] == 1 ? mult[0] : 1.0f;
	const int32_t *ecol = NULL;
	if (sy && q.pack512 && !p[18]) {
		for (int64_t j = 0; j < cl; j++)
			bcol[j] += (int32_t)K * row.ua * sbv[j] - row.ua * cs[j];
		ecol = bcol;
	}
	const int8_t *Sp = (const int8_t *)k->in[0] + (c0 / 16) * k4n * 64;
	for (int64_t s0 = 0; s0 < strips; s0 += QG_VNNI_NS) {
		int ns = (int)SK_MIN((int64_t)QG_VNNI_NS, strips - s0);
		int64_t j0 = s0 * 16, w = SK_MIN((int64_t)ns * 16, cl - j0);
		const int8_t *S = Sp + s0 * k4n * 64;
		int four = q.micro44 && ns == QG_VNNI_NS;
		int mr = four ? QG_VNNI_MR : QG_MR;
		for (int64_t r0 = 0; r0 < pl; r0 += mr) {
			int rows = (int)SK_MIN((int64_t)mr, pl - r0);
			if (four) {
				q.micro44(U + r0 * kp, kp, S, kp, rows, ns, acc, lacc);
			} else {
				for (int ss = 0; ss < ns; ss += 2)
					q.micro(U + r0 * kp, kp, S + ss * k4n * 64, kp, rows, SK_MIN(2, ns - ss),
						acc + ss * 16, lacc);
			}
			qg_row rw[QG_MR];
			for (int r = 0; r < rows; r++) {
				rw[r] = row;
				rw[r].rs = rsum[r0 + r];
				rw[r].rt = -sbv[0] * rw[r].rs;
			}
			int64_t at = (c0 + j0) * ldc + p0 + r0;
			if (sy && q.pack512) {
				qg_epilogue_rows_b512t(acc, lacc, rows, w, sbv + j0, cs + j0, bcol + j0,
						       mcol + j0, (int32_t)K, rw, ecol ? ecol + j0 : NULL,
						       p[20] == 2, Yb + at, ldc);
			} else {
				for (int r = 0; r < rows; r++) {
					float f[64];
					uint8_t t[64];
					if (sy)
						qg_epilogue_b(acc + r * lacc, w, sbv + j0, cs + j0, bcol + j0,
							      mcol + j0, (int32_t)K, rw[r], sy, t);
					else
						qg_epilogue(acc + r * lacc, w, sbv + j0, cs + j0, bcol + j0,
							    mcol + j0, (int32_t)K, rw[r], f);
					for (int64_t j = 0; j < w; j++) {
						if (sy)
							Yb[at + j * ldc + r] = t[j];
						else
							Y[at + j * ldc + r] = f[j];
					}
				}
			}
			/* a preemption check each row group (at most 8 rows x 64
			 * channels x K, as the column form's row groups) */
			if (SK_STOPPED(ctx))
				return;
		}
	}
}

void sk_block_qgemm(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	if (k->t[7] == 2) {
		qg_block_rows(k, blk, ctx);
		return;
	}
	const int64_t *p = k->p;
	int64_t M = p[0], N = p[1], K = p[2], lda = p[3], ldb = p[4], ldc = p[5];
	int64_t mt = k->t[0], nt = k->t[1], mtiles = k->t[2], ntiles = k->t[3], kp = k->t[4];
	int64_t ni = blk % ntiles, mi = (blk / ntiles) % mtiles, b = blk / (ntiles * mtiles);
	int64_t b2 = b % p[7], b1 = b / p[7];
	int64_t m0 = mi * mt, ml = SK_MIN(mt, M - m0);
	int64_t n0 = ni * nt, nl = SK_MIN(nt, N - n0);
	int64_t strips = SK_CDIV(nl, 16);
	int64_t aoffs = b1 * p[8] + b2 * p[9];
	int sa = sk_store_in(k, 0), sb = sk_store_in(k, 1), sy = sk_store_out(k);
	int64_t boffs = b1 * p[10] + b2 * p[11];
	float *Y = k->out + (sy ? 0 : b1 * p[12] + b2 * p[13]);
	uint8_t *Yb = (uint8_t *)k->out + (sy ? b1 * p[12] + b2 * p[13] : 0);
	int64_t roff = b1 * p[14] + b2 * p[15]; /* per-row parameters */
	int aoff = p[16] ? 128 : 0, boff = p[17] ? 0 : 128;

	uint8_t *base = (uint8_t *)sk_scratch(ctx, SK_CDIV(qg_scratch_bytes(mt, nt, kp, K, p[27], k->t[5]), 4));
	if (!base)
		return;
	int32_t *rsum = (int32_t *)base;
	int32_t *csum = rsum + mt;
	int32_t *acc = csum + nt;
	int64_t lacc = SK_CDIV(nt, QG_NR) * QG_NR; /* acc: QG_AMX_M rows of lacc */
	int32_t *sbv = acc + QG_AMX_M * lacc, *bcol = sbv + nt;
	float *mcol = (float *)(bcol + nt);
	uint8_t *U = (uint8_t *)(mcol + nt);
	U = (uint8_t *)(((uintptr_t)U + 63) & ~(uintptr_t)63);
	int8_t *S = (int8_t *)(U + mt * kp);

	/* U: rows m0.. of A as u8, packed once at compile time (constant A:
	 * p[26], aoffs counts rows) or here */
	qg_impl q = qg_choose(kp);
	const uint8_t *Up;
	const int32_t *rs;
	if (p[26]) {
		Up = (const uint8_t *)k->in[0] + (aoffs + m0) * kp;
		rs = (const int32_t *)k->in[7] + aoffs + m0;
	} else if (sa) {
		qg_pack_rows_b((const uint8_t *)k->in[0] + aoffs + m0 * lda, sa, lda, ml, K, kp, aoff, U, rsum);
		Up = U;
		rs = rsum;
		SK_POLL(ctx);
	} else {
		qg_pack_rows(q.pack512, k->in[0] + aoffs + m0 * lda, lda, ml, K, kp, aoff, U, rsum);
		Up = U;
		rs = rsum;
		SK_POLL(ctx);
	}
	/* S: columns n0.. of B as s8 panels of 16 columns x 4 steps, packed
	 * once at compile time (constant B: p[25]) or here */
	int64_t k4n = kp / 4;
	const int8_t *Sp;
	const int32_t *cs;
	if (p[25]) {
		Sp = (const int8_t *)k->in[1] + (n0 / 16) * k4n * 64;
		cs = (const int32_t *)k->in[6] + n0;
	} else if (p[27]) {
		/* the im2col of positions n0.. of image b1, group b2 */
		const int64_t *c = k->aux;
		int64_t Cg = c[1] / c[5];
		int64_t xo = (b1 * c[1] + b2 * Cg) * c[2] * c[3];
		const float *xg = (const float *)sk_elem(k->in[1], sb, xo);
		if (qg_gather_1x1_ok(c, sb)) {
			uint8_t *col = (uint8_t *)(S + SK_CDIV(nt, QG_NR) * QG_NR * kp);
			qg_gather_1x1(q.pack512, (const uint8_t *)xg, c, n0, nl, K, col);
			SK_POLL(ctx);
			qg_pack_cols(q.pack512, col, sb, nl, K, nl, kp, boff, S, csum);
		} else if (k->t[5] && q.pack512) {
			int8_t *img = (int8_t *)(S + SK_CDIV(nt, QG_NR) * QG_NR * kp);
			int64_t rows = qg_img_fill(xg, sb, c, n0, nl, boff, k->f[1], k->t[6], img);
			SK_POLL(ctx);
			int32_t *koff = (int32_t *)(((uintptr_t)(img + k->t[5]) + 3) & ~(uintptr_t)3);
			qg_pack_im2col_img(c, n0, nl, K, kp, img, rows, k->t[6], koff, S, csum);
		} else if (sb) {
			qg_pack_im2col_b(xg, sb, c, n0, nl, K, kp, boff, k->f[1], S, csum);
		} else if (q.pack512) {
			qg_pack_im2col_512(xg, c, n0, nl, K, kp, boff, k->f[1], S, csum);
		} else {
			float *col = (float *)(S + SK_CDIV(nt, QG_NR) * QG_NR * kp);
			sk_im2col_tile(xg, Cg, c[2], c[3], c[6], c[7], c[8], c[9], c[10], c[11],
				       c[12], c[13], c[15], n0, nl, col, nl, k->f[1]);
			SK_POLL(ctx);
			qg_pack_cols(0, col, 0, nl, K, nl, kp, boff, S, csum);
		}
		Sp = S;
		cs = csum;
		SK_POLL(ctx);
	} else {
		qg_pack_cols(q.pack512, sk_elem(k->in[1], sb, boffs + n0), sb, ldb, K, nl, kp, boff, S, csum);
		Sp = S;
		cs = csum;
		SK_POLL(ctx);
	}

	const float *za = k->in[2], *zb = k->in[3], *mult = k->in[4];
	const int32_t *bias = (const int32_t *)k->in[5];
	/* the tile's per-column terms */
	if (zb && p[19]) {
		for (int64_t j = 0; j < nl; j++)
			sbv[j] = (int32_t)zb[n0 + j] - boff;
	} else {
		int32_t sb0 = (int32_t)(zb ? zb[0] : 0.0f) - boff;
		for (int64_t j = 0; j < nl; j++)
			sbv[j] = sb0;
	}
	if (p[21] == 2)
		memcpy(bcol, bias + n0, (size_t)nl * sizeof(int32_t));
	else
		memset(bcol, 0, (size_t)nl * sizeof(int32_t));
	for (int64_t j = 0; j < nl; j++)
		mcol[j] = p[20] == 3 ? mult[n0 + j] : 1.0f;
	qg_row row = {.zy = k->f[0], .lo = (float)p[23], .hi = (float)p[24], .requant = (int)p[22]};
	/* bytes out on AVX-512 with per-tensor zero points (the usual case):
	 * each column's terms once for the tile, in bcol's place */
	const int32_t *ecol = NULL;
	if (sy && q.pack512 && !p[18] && !p[19]) {
		int32_t ua0 = (int32_t)(za ? za[0] : 0.0f) + aoff;
		for (int64_t j = 0; j < nl; j++)
			bcol[j] += K * ua0 * sbv[j] - ua0 * cs[j];
		ecol = bcol;
	}
	/* AMX tiles are configured for the whole row loop (released before a
	 * preempted block returns) */
	int amx = q.amx && ml >= QG_AMX_M && strips >= 2;
	/* the vector micro-kernel: 4 x 4 on tiles of more than 4 strips */
	qg_micro_fn micro = q.micro;
	int mr = QG_MR, ns_max = 2;
	if (q.micro44 && strips > QG_VNNI_NS)
		micro = q.micro44, mr = QG_VNNI_MR, ns_max = QG_VNNI_NS;
	/* bytes out with per-tensor zero points on the VNNI kernels: whole
	 * micro-tiles are requantised in registers and stored as bytes
	 * (qg_micro_vnni44_req), the rest through acc and the epilogue */
	int mc = p[20] == 3;
	int req = q.req && ecol && !amx && qg_req_packs(sy, row.lo, row.hi);
	if (amx)
		qg_amx_begin();
	for (int64_t r0 = 0; r0 < ml;) {
		/* 32 rows at a time on AMX tiles, else mr on the vector unit */
		int tile = amx && ml - r0 >= QG_AMX_M;
		int rows = tile ? QG_AMX_M : (int)SK_MIN((int64_t)mr, ml - r0);
		int step = tile ? 2 : ns_max;
		qg_rows g = {.rs = rs + r0, .za = za, .bias = bias, .mult = mult, .roff = roff,
			     .m0 = m0 + r0, .aoff = aoff, .sb0 = sbv[0], .zrow = (int)p[18],
			     .bmode = (int)p[21], .mmode = (int)p[20]};
		int fused = req && !tile && rows == mr;
		qg_req_terms rq = {.zy = row.zy, .lo = row.lo, .hi = row.hi, .code = sy};
		for (int r = 0; fused && r < rows; r++) {
			qg_row terms = row;
			qg_row_terms(&g, r, &terms);
			rq.rt[r] = terms.rt;
			rq.mrow[r] = terms.mrow;
		}
		/* the row group's sums over all the tile's columns, then one
		 * epilogue call per row; the strips [0, done) requantised in
		 * registers (every micro-tile of the group's whole width, the
		 * last one masked to the tile's columns) */
		int64_t done = 0;
		for (int64_t s0 = 0; s0 < strips; s0 += step) {
			int ns = (int)SK_MIN((int64_t)step, strips - s0);
			if (fused && ns == step) {
				rq.cols = (int)SK_MIN(nl - s0 * 16, (int64_t)(16 * ns));
				rq.ecol = ecol + s0 * 16;
				rq.mcol = mc ? mcol + s0 * 16 : NULL;
				uint8_t *y = Yb + (m0 + r0) * ldc + n0 + s0 * 16;
				if (mr == QG_VNNI_MR)
					qg_micro_vnni44_req(Up + r0 * kp, kp, Sp + s0 * k4n * 64, k4n, &rq, y, ldc);
				else
					qg_micro_vnni82_req(Up + r0 * kp, kp, Sp + s0 * k4n * 64, k4n, &rq, y, ldc);
				done = s0 + ns;
			} else if (tile && ns == 2) {
				qg_micro_amx(Up + r0 * kp, kp, Sp + s0 * k4n * 64, kp, acc + s0 * 16, lacc);
			} else {
				for (int rr = 0; rr < rows; rr += mr)
					micro(Up + (r0 + rr) * kp, kp, Sp + s0 * k4n * 64, kp,
					      (int)SK_MIN((int64_t)mr, (int64_t)(rows - rr)), ns,
						acc + rr * lacc + s0 * 16, lacc);
			}
		}
		if (sy && q.pack512) {
			int64_t o = done * 16;
			if (o < nl)
				qg_epilogue_rows_b512(acc + o, lacc, rows, nl - o, sbv + o, cs + o, bcol + o,
						      mcol + o, (int32_t)K, row, &g, ecol ? ecol + o : NULL, mc,
						      Yb + n0 + o, ldc);
		} else {
			for (int r = 0; r < rows; r++) {
				int64_t m = m0 + r0 + r;
				qg_row_terms(&g, r, &row);
				if (sy)
					qg_epilogue_b(acc + r * lacc, nl, sbv, cs, bcol, mcol, (int32_t)K, row, sy,
						      Yb + m * ldc + n0);
				else
					qg_epilogue(acc + r * lacc, nl, sbv, cs, bcol, mcol, (int32_t)K, row,
						    Y + m * ldc + n0);
			}
		}
		r0 += rows;
		if (SK_STOPPED(ctx))
			break;
	}
	if (amx)
		qg_amx_end();
}
