/*
 * pool.c: max / average pooling and global pooling. Blocks are chunks of
 * (n, c) planes.
 */
#include "sluice_cpu.h"
#include "skmath.h"

#include <float.h>

static int64_t plane_chunk(int64_t planes, int64_t per_plane, int units)
{
	int64_t want = units * 4;
	int64_t by_work = planes * per_plane / 16384;
	if (want > by_work)
		want = by_work > 0 ? by_work : 1;
	return sk_split(planes, want, 1);
}

/* ---- max pooling on bytes ---------------------------------------------- */

#define PB_512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))

/* pool_bytes_shape reports whether max pooling with bytes in and out
 * runs on bytes (pool_max_bytes_512, where the CPU has AVX-512 BW and
 * VBMI): both of one type, columns at stride 1 or 2, undilated, up to 64
 * taps a row. */
static int pool_bytes_shape(const int64_t *p)
{
	int64_t st = p[SKP_STORE];
	return p[13] == 0 && (st & 3) && (st & 3) == ((st >> 2) & 3) && p[8] <= 2 && p[12] == 1 &&
	       p[6] <= 64;
}

/* pool_bytes_row / pool_bytes_hrow: a padded input row's length (the PL
 * columns before the row, the row, and as far as the last 64 outputs'
 * loads read) and a row of the horizontal maxima's (whole 64-byte
 * vectors). */
static inline int64_t pool_bytes_hrow(const int64_t *p) { return SK_CDIV(p[4], 64) * 64; }
static inline int64_t pool_bytes_row(const int64_t *p)
{
	return SK_MAX(p[8] * pool_bytes_hrow(p) + p[6] + 128, p[10] + p[2]) + 64;
}

/* POOL_BYTES_RING is how many padded rows pool_max_bytes_512 keeps. */
#define POOL_BYTES_RING 4

/* pool_bytes_scratch is the floats pool_max_bytes_512 needs: the
 * horizontal maxima of every input row, then the padded rows. */
static inline int64_t pool_bytes_scratch(const int64_t *p)
{
	return SK_CDIV(p[1] * pool_bytes_hrow(p) + POOL_BYTES_RING * pool_bytes_row(p), 4);
}

void sk_prep_pool(sk_kernel *k, int units)
{
	const int64_t *p = k->p;
	for (int i = 0; i < 17; i++)
		if (p[i] < 0) {
			k->grid = -1;
			return;
		}
	if (p[0] < 1 || p[3] < 1 || p[4] < 1 || p[5] < 1 || p[6] < 1 || p[7] < 1 ||
	    p[8] < 1 || p[11] < 1 || p[12] < 1) {
		k->grid = -1;
		return;
	}
	/* bytes (max pooling of 8-bit integers): a plane and its output
	 * are staged as floats in the scratch */
	int64_t st = p[SKP_STORE];
	if (!sk_store_ok(st, p[13] == 0 ? 1u | 1u << 1 : 0)) {
		k->grid = -1;
		return;
	}
	int64_t ct = plane_chunk(p[0], p[3] * p[4] * p[5] * p[6], units);
	k->t[0] = ct;
	k->grid = SK_CDIV(p[0], ct);
	k->scratch = st ? p[1] * p[2] + p[3] * p[4] : 0;
	if (pool_bytes_shape(p))
		k->scratch = SK_MAX(k->scratch, pool_bytes_scratch(p));
}

/* taps of a window row whose output ranges pool_plane keeps */
#define POOL_TAPS 16

/* tap_cols gives the output columns [*lo, *hi) whose input column
 * ow * SW + off lies inside the row of W. */
static inline void tap_cols(int64_t off, int64_t W, int64_t SW, int64_t OW, int64_t *lo,
			    int64_t *hi)
{
	*lo = off >= 0 ? 0 : SK_CDIV(-off, SW);
	*hi = SK_MIN((W - 1 - off) < 0 ? 0 : (W - 1 - off) / SW + 1, OW);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include "sk512.h"

/* POOL_CHUNKS: the widest output row pool_max_512 takes, in vectors */
#define POOL_CHUNKS 16

/* pool_max_512 is pool_plane's max pooling at stride 1 or 2 (up to
 * POOL_TAPS taps a window row, POOL_CHUNKS vectors a row) with 16 output
 * columns a vector, every tap of a window applied in registers before
 * the one store: each column keeps its value unless the tap's input is
 * greater (an ordered compare: a NaN input never wins, a tie of -0 and +0
 * keeps the earlier), in pool_plane's tap order, over the columns whose
 * input column lies inside the row (tlo, thi); columns whose window
 * holds padding only, and rows with no input row, are 0. Stride 2 loads
 * 32 input columns and keeps the even ones. */
__attribute__((target("avx512f"))) static void pool_max_512(const float *x, float *y,
							      const int64_t *p, const int64_t *tlo,
							      const int64_t *thi, int64_t clo,
							      int64_t chi)
{
	int64_t H = p[1], W = p[2], OH = p[3], OW = p[4], KH = p[5], KW = p[6];
	int64_t SH = p[7], SW = p[8], PT = p[9], PL = p[10], DH = p[11], DW = p[12];
	int64_t nc = SK_CDIV(OW, 16);
	/* per chunk and tap: the lanes it updates and, at stride 2, the
	 * lanes of its two loads (element 2i for lane i) */
	__mmask16 tm[POOL_CHUNKS + 3][POOL_TAPS], m0[POOL_CHUNKS + 3][POOL_TAPS];
	__mmask16 m1[POOL_CHUNKS + 3][POOL_TAPS], keep[POOL_CHUNKS], ms[POOL_CHUNKS];
	for (int64_t c = nc; c < nc + 3; c++)
		for (int64_t kw = 0; kw < KW; kw++)
			tm[c][kw] = m0[c][kw] = m1[c][kw] = 0;
	for (int64_t c = 0; c < nc; c++) {
		int64_t ow0 = 16 * c;
		ms[c] = 0;
		keep[c] = 0;
		for (int i = 0; i < 16 && ow0 + i < OW; i++) {
			ms[c] |= (__mmask16)(1u << i);
			if (ow0 + i >= clo && ow0 + i < chi)
				keep[c] |= (__mmask16)(1u << i);
		}
		for (int64_t kw = 0; kw < KW; kw++) {
			tm[c][kw] = m0[c][kw] = m1[c][kw] = 0;
			for (int i = 0; i < 16; i++) {
				int64_t ow = ow0 + i;
				if (ow < tlo[kw] || ow >= thi[kw] || ow >= OW)
					continue;
				tm[c][kw] |= (__mmask16)(1u << i);
				if (2 * i < 16)
					m0[c][kw] |= (__mmask16)(1u << (2 * i));
				else
					m1[c][kw] |= (__mmask16)(1u << (2 * i - 16));
			}
		}
	}
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
					       28, 30);
	const __m512 init = _mm512_set1_ps(-FLT_MAX), zero = _mm512_setzero_ps();
	for (int64_t oh = 0; oh < OH; oh++) {
		float *yr = y + oh * OW;
		int64_t h0 = oh * SH - PT, rows = 0;
		for (int64_t kh = 0; kh < KH; kh++) {
			int64_t ih = h0 + kh * DH;
			rows += ih >= 0 && ih < H;
		}
		/* four chunks at a time, their chains advancing a tap at a
		 * time so that they overlap (a chunk past the row has no lanes:
		 * its loads read nothing) */
		for (int64_t c0 = 0; c0 < nc; c0 += 4) {
			__m512 a[4] = {init, init, init, init};
			for (int64_t kh = 0; kh < KH && rows; kh++) {
				int64_t ih = h0 + kh * DH;
				if (ih < 0 || ih >= H)
					continue;
				const float *xr = x + ih * W;
				for (int64_t kw = 0; kw < KW; kw++) {
					const float *xs = xr + kw * DW - PL + SW * 16 * c0;
#pragma GCC unroll 4
					for (int j = 0; j < 4; j++) {
						__mmask16 t = tm[c0 + j][kw];
						__m512 v;
						if (SW == 1) {
							v = _mm512_maskz_loadu_ps(t, xs + 16 * j);
						} else {
							__m512 v0 = _mm512_maskz_loadu_ps(m0[c0 + j][kw], xs + 32 * j);
							__m512 v1 = _mm512_maskz_loadu_ps(m1[c0 + j][kw], xs + 32 * j + 16);
							v = _mm512_permutex2var_ps(v0, even, v1);
						}
						/* vmaxps: v > a ? v : a, lane by lane */
						a[j] = _mm512_mask_max_ps(a[j], t, v, a[j]);
					}
				}
			}
			for (int j = 0; j < 4 && c0 + j < nc; j++) {
				__m512 r = rows ? _mm512_mask_mov_ps(zero, keep[c0 + j], a[j]) : zero;
				_mm512_mask_storeu_ps(yr + 16 * (c0 + j), ms[c0 + j], r);
			}
		}
	}
}
/* pool_max_3s2_512 is pool_max_512 for the 3x3 window at stride 2 with
 * a padding of 1 before (ResNet's), separable: each input row's maxima
 * over the window's three columns (x[2 ow - 1], x[2 ow], x[2 ow + 1]:
 * the odd floats one lane back, the even, the odd), then each output
 * row's maxima over its three rows' (the row below an output row is the
 * row above the next one's: kept in registers, 64 columns at a time). A
 * column outside the row reads -inf, which never wins. Max in tap order
 * (v > a ? v : a) keeps the first of the window's greatest values in
 * row-major order, and the row-major first is the first row's first:
 * the same bits as pool_max_512 (ties of -0 and +0, NaNs skipped). */
__attribute__((target("avx512f"))) static void pool_max_3s2_512(const float *x, float *y,
								  const int64_t *p, int64_t clo,
								  int64_t chi)
{
	int64_t H = p[1], W = p[2], OH = p[3], OW = p[4];
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
					       28, 30);
	const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
	const __m512 ninf = _mm512_set1_ps(-INFINITY), init = _mm512_set1_ps(-FLT_MAX);
	const __m512 zero = _mm512_setzero_ps();
	int64_t nc = SK_CDIV(OW, 16);
	for (int64_t g0 = 0; g0 < nc; g0 += 4) {
		int64_t ng = SK_MIN(4, nc - g0);
		__mmask16 keep[4], ms[4];
		for (int64_t j = 0; j < 4; j++) {
			int64_t ow0 = 16 * (g0 + j);
			ms[j] = j < ng ? sk_lanes16(ow0, OW) : 0;
			keep[j] = ms[j] & sk_lanes16(ow0 - clo, chi - clo);
		}
		/* the row maxima of input row 2 oh - 1, from the last output row */
		__m512 below[4];
		int64_t below_row = -2;
		for (int64_t oh = 0; oh < OH; oh++) {
			__m512 a[4] = {init, init, init, init};
			int rows = 0;
			for (int64_t kh = 0; kh < 3; kh++) {
				int64_t ih = 2 * oh - 1 + kh;
				if (ih < 0 || ih >= H)
					continue;
				rows++;
				__m512 hm[4];
				if (ih == below_row) {
					for (int j = 0; j < 4; j++)
						hm[j] = below[j];
				} else {
					const float *xr = x + ih * W;
					int64_t c0 = 32 * g0; /* input column of the first lane's even tap */
					__m512 prev = c0 >= 1 && c0 - 1 < W ? _mm512_set1_ps(xr[c0 - 1]) : ninf;
#pragma GCC unroll 4
					for (int j = 0; j < 4; j++) {
						int64_t c = c0 + 32 * j;
						__m512 lo, hi;
						if (c + 32 <= W) {
							lo = _mm512_loadu_ps(xr + c);
							hi = _mm512_loadu_ps(xr + c + 16);
						} else {
							lo = _mm512_mask_loadu_ps(ninf, sk_lanes16(c, W), xr + c);
							hi = _mm512_mask_loadu_ps(ninf, sk_lanes16(c + 16, W), xr + c + 16);
						}
						__m512 e = _mm512_permutex2var_ps(lo, even, hi);
						__m512 o = _mm512_permutex2var_ps(lo, odd, hi);
						/* x[2 ow - 1]: the odd floats one lane back */
						__m512 l = _mm512_castsi512_ps(_mm512_alignr_epi32(
							_mm512_castps_si512(o), _mm512_castps_si512(prev), 15));
						prev = o;
						__m512 m = _mm512_max_ps(l, init);
						m = _mm512_max_ps(e, m);
						hm[j] = _mm512_max_ps(o, m);
					}
					if (ih == 2 * oh + 1) {
						for (int j = 0; j < 4; j++)
							below[j] = hm[j];
						below_row = ih;
					}
				}
				for (int j = 0; j < 4; j++)
					a[j] = _mm512_max_ps(hm[j], a[j]);
			}
			float *yr = y + oh * OW + 16 * g0;
			for (int64_t j = 0; j < ng; j++) {
				__m512 r = rows ? _mm512_mask_mov_ps(zero, keep[j], a[j]) : zero;
				if (ms[j] == 0xffff)
					_mm512_storeu_ps(yr + 16 * j, r);
				else
					_mm512_mask_storeu_ps(yr + 16 * j, ms[j], r);
			}
		}
	}
}
#endif

/* pool_plane pools one plane row by row: for each kernel tap the valid
 * output columns form one range, so the inner loops are branch-free. */
SK_MV static void pool_plane(const float *x, float *y, const int64_t *p, int wide)
{
	int64_t H = p[1], W = p[2], OH = p[3], OW = p[4], KH = p[5], KW = p[6];
	int64_t SH = p[7], SW = p[8], PT = p[9], PL = p[10], DH = p[11], DW = p[12];
	int64_t mode = p[13], incl = p[14], PB = p[15], PR = p[16];
	/* columns with at least one valid tap: [clo, chi); each tap's range
	 * of valid output columns, the same on every row (the first
	 * POOL_TAPS taps' kept, the divisions out of the row loop) */
	int64_t clo = OW, chi = 0;
	int64_t tlo[POOL_TAPS], thi[POOL_TAPS];
	for (int64_t kw = 0; kw < KW; kw++) {
		int64_t lo, hi;
		tap_cols(kw * DW - PL, W, SW, OW, &lo, &hi);
		if (kw < POOL_TAPS) {
			tlo[kw] = lo;
			thi[kw] = hi;
		}
		if (lo < hi) {
			clo = SK_MIN(clo, lo);
			chi = SK_MAX(chi, hi);
		}
	}
#if defined(__x86_64__) && defined(__GNUC__)
	if (wide && mode == 0 && KH == 3 && KW == 3 && SH == 2 && SW == 2 && DH == 1 && DW == 1 &&
	    PT == 1 && PL == 1) {
		pool_max_3s2_512(x, y, p, clo, chi);
		return;
	}
	if (wide && mode == 0 && SW <= 2 && KW <= POOL_TAPS && OW <= 16 * POOL_CHUNKS) {
		pool_max_512(x, y, p, tlo, thi, clo, chi);
		return;
	}
#else
	(void)wide;
#endif
	for (int64_t oh = 0; oh < OH; oh++) {
		float *yr = y + oh * OW;
		int64_t h0 = oh * SH - PT, rows = 0;
		float init = mode == 0 ? -FLT_MAX : 0.0f;
		for (int64_t ow = 0; ow < OW; ow++)
			yr[ow] = init;
		for (int64_t kh = 0; kh < KH; kh++) {
			int64_t ih = h0 + kh * DH;
			if (ih < 0 || ih >= H)
				continue;
			rows++;
			const float *xr = x + ih * W;
			for (int64_t kw = 0; kw < KW; kw++) {
				int64_t off = kw * DW - PL, lo, hi;
				if (kw < POOL_TAPS) {
					lo = tlo[kw];
					hi = thi[kw];
				} else {
					tap_cols(off, W, SW, OW, &lo, &hi);
				}
				const float *xs = xr + off;
				if (mode == 0) {
					if (SW == 1)
						for (int64_t ow = lo; ow < hi; ow++)
							yr[ow] = xs[ow] > yr[ow] ? xs[ow] : yr[ow];
					else if (SW == 2)
						for (int64_t ow = lo; ow < hi; ow++)
							yr[ow] = xs[2 * ow] > yr[ow] ? xs[2 * ow] : yr[ow];
					else
						for (int64_t ow = lo; ow < hi; ow++)
							yr[ow] = xs[ow * SW] > yr[ow] ? xs[ow * SW] : yr[ow];
				} else {
					if (SW == 1)
						for (int64_t ow = lo; ow < hi; ow++)
							yr[ow] += xs[ow];
					else
						for (int64_t ow = lo; ow < hi; ow++)
							yr[ow] += xs[ow * SW];
				}
			}
		}
		if (rows == 0) {
			for (int64_t ow = 0; ow < OW; ow++)
				yr[ow] = 0;
			continue;
		}
		for (int64_t ow = 0; ow < OW; ow++) {
			if (ow < clo || ow >= chi) {
				yr[ow] = 0; /* the window holds padding only */
				continue;
			}
			if (mode == 0)
				continue;
			int64_t w0 = ow * SW - PL, cnt;
			if (incl) {
				int64_t he = SK_MIN(h0 + (KH - 1) * DH + 1, H + PB);
				int64_t we = SK_MIN(w0 + (KW - 1) * DW + 1, W + PR);
				cnt = ((he - h0 + DH - 1) / DH) * ((we - w0 + DW - 1) / DW);
			} else {
				int64_t cols = 0;
				for (int64_t kw = 0; kw < KW; kw++) {
					int64_t iw = w0 + kw * DW;
					cols += iw >= 0 && iw < W;
				}
				cnt = rows * cols;
			}
			yr[ow] = cnt ? yr[ow] / (float)cnt : 0.0f;
		}
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
/* pool_max_bytes_512 is max pooling of one plane of bytes (code: uint8
 * or int8) into bytes, with pool_plane's values: the largest input of
 * each window (taps inside the input only), 0 where a window holds
 * padding only. Max pooling is separable: each input row's maxima over
 * the window's columns (64 outputs a vector; at stride 2 the even bytes
 * of 128 by one permutation) go to H (a row of hl bytes each), from a
 * copy of the row between bytes of the type's least value (a tap outside
 * the row never wins), then each output row is the maxima of its
 * window's rows of H. The integers compare exactly, so any order gives
 * the float path's values. R: the padded row's scratch. */
PB_512 static void pool_max_bytes_512(const uint8_t *x, const uint8_t *xend, uint8_t *y,
				      const int64_t *p, int code, int64_t clo, int64_t chi, uint8_t *H,
				      uint8_t *R)
{
	int64_t Hn = p[1], W = p[2], OH = p[3], OW = p[4], KH = p[5], KW = p[6];
	int64_t SH = p[7], SW = p[8], PT = p[9], PL = p[10], DH = p[11];
	int64_t hl = pool_bytes_hrow(p), L = pool_bytes_row(p);
	int s8 = code == SK_STORE_S8;
	const __m512i least = _mm512_set1_epi8(s8 ? (char)0x80 : 0);
	const __m512i even = _mm512_setr_epi64(0x0e0c0a0806040200ll, 0x1e1c1a1816141210ll,
					       0x2e2c2a2826242220ll, 0x3e3c3a3836343230ll,
					       0x4e4c4a4846444240ll, 0x5e5c5a5856545250ll,
					       0x6e6c6a6866646260ll, 0x7e7c7a7876747270ll);
	for (int64_t j = 0; j < POOL_BYTES_RING * L; j += 64)
		_mm512_storeu_si512((void *)(R + j), least);
	/* the row after PL of the least value, whole vectors (the bytes
	 * past the row, read from the next or not at all, then the least
	 * value again), copied POOL_BYTES_RING - 1 rows ahead of its use:
	 * loads right after the stores they read (at other offsets) cost
	 * this routine 1.4-1.5x here */
	for (int64_t ih = 0; ih < Hn + POOL_BYTES_RING - 1; ih++) {
		if (ih < Hn) {
			const uint8_t *xr = x + ih * W;
			uint8_t *rc = R + (ih % POOL_BYTES_RING) * L;
			for (int64_t j = 0; j < W; j += 64) {
				__m512i v = xr + j + 64 <= xend ? _mm512_loadu_si512((const void *)(xr + j))
								: _mm512_maskz_loadu_epi8(sk_bytes64(j, W), xr + j);
				_mm512_storeu_si512((void *)(rc + PL + j), v);
			}
			_mm512_storeu_si512((void *)(rc + PL + W), least);
		}
		int64_t iu = ih - (POOL_BYTES_RING - 1); /* the row used now */
		if (iu < 0)
			continue;
		const uint8_t *ru = R + (iu % POOL_BYTES_RING) * L;
		uint8_t *hr = H + iu * hl;
		for (int64_t ow = 0; ow < hl; ow += 64) {
			__m512i mx = least;
			for (int64_t kw = 0; kw < KW; kw++) {
				const uint8_t *s = ru + SW * ow + kw;
				__m512i v = SW == 1 ? _mm512_loadu_si512((const void *)s)
						    : _mm512_permutex2var_epi8(_mm512_loadu_si512((const void *)s), even,
									       _mm512_loadu_si512((const void *)(s + 64)));
				mx = s8 ? _mm512_max_epi8(mx, v) : _mm512_max_epu8(mx, v);
			}
			_mm512_storeu_si512((void *)(hr + ow), mx);
		}
	}
	for (int64_t oh = 0; oh < OH; oh++) {
		uint8_t *yr = y + oh * OW;
		int64_t h0 = oh * SH - PT;
		for (int64_t ow = 0; ow < OW; ow += 64) {
			__m512i mx = least;
			int rows = 0;
			for (int64_t kh = 0; kh < KH; kh++) {
				int64_t ih = h0 + kh * DH;
				if (ih < 0 || ih >= Hn)
					continue;
				rows++;
				__m512i v = _mm512_loadu_si512((const void *)(H + ih * hl + ow));
				mx = s8 ? _mm512_max_epi8(mx, v) : _mm512_max_epu8(mx, v);
			}
			/* 0 where the window holds padding only: no row, or
			 * a column outside [clo, chi) */
			mx = _mm512_maskz_mov_epi8(rows ? sk_bytes64(ow - clo, chi - clo) : 0, mx);
			if (ow + 64 <= OW)
				_mm512_storeu_si512((void *)(yr + ow), mx);
			else
				_mm512_mask_storeu_epi8(yr + ow, sk_bytes64(ow, OW), mx);
		}
	}
}
#endif

void sk_block_pool(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t ct = k->t[0];
	int64_t c0 = blk * ct, c1 = SK_MIN(c0 + ct, p[0]);
	int64_t HW = p[1] * p[2], OHW = p[3] * p[4];
	/* AVX-512 where sgemm uses it (BenchmarkMaxPool, ResNet's 3x3 stride 2
	 * layer, one thread, Zen 5 VM: 247-282 us against 472-508 for the
	 * compiler's loops) */
	int wide = 0;
#if defined(__x86_64__) && defined(__GNUC__)
	wide = sk_gemm_isa() == SK_ISA_AVX512;
#endif
	int sx = sk_store_in(k, 0), sy = sk_store_out(k);
	float *xs = NULL, *ys = NULL;
	if (sx || sy) {
		if (!(xs = sk_scratch(ctx, k->scratch)))
			return;
		ys = xs + HW;
	}
#if defined(__x86_64__) && defined(__GNUC__)
	/* bytes in and out: max pooling on the bytes (ResNet-18-int8's
	 * layer: 0.46 of the samples of staging each plane as float32, its
	 * pooling and the store back, perf record alternated twice) */
	if (wide && pool_bytes_shape(p) && sk_cpu_vbmi() && k->scratch >= pool_bytes_scratch(p)) {
		int64_t clo = p[4], chi = 0;
		for (int64_t kw = 0; kw < p[6]; kw++) {
			int64_t lo, hi;
			tap_cols(kw * p[12] - p[10], p[2], p[8], p[4], &lo, &hi);
			if (lo < hi) {
				clo = SK_MIN(clo, lo);
				chi = SK_MAX(chi, hi);
			}
		}
		uint8_t *hm = (uint8_t *)xs;
		const uint8_t *xend = (const uint8_t *)k->in[0] + p[0] * HW;
		for (int64_t c = c0; c < c1; c++) {
			SK_POLL(ctx);
			pool_max_bytes_512((const uint8_t *)k->in[0] + c * HW, xend, (uint8_t *)k->out + c * OHW,
					   p, sx, clo, chi, hm, hm + p[1] * pool_bytes_hrow(p));
		}
		return;
	}
#endif
	for (int64_t c = c0; c < c1; c++) {
		SK_POLL(ctx);
		const float *x = k->in[0] + c * HW;
		if (sx) {
			sk_store_load(sk_elem(k->in[0], sx, c * HW), sx, HW, xs);
			x = xs;
		}
		pool_plane(x, sy ? ys : k->out + c * OHW, p, wide);
		if (sy)
			sk_store_save(ys, sy, OHW, (void *)sk_elem(k->out, sy, c * OHW));
	}
}

void sk_prep_gpool(sk_kernel *k, int units)
{
	if (k->p[0] < 1 || k->p[1] < 1) {
		k->grid = -1;
		return;
	}
	int64_t ct = plane_chunk(k->p[0], k->p[1], units);
	k->t[0] = ct;
	k->grid = SK_CDIV(k->p[0], ct);
}

/* running sums of a global average (a multiple of every vector width) */
#define GP_LANES 64

#if defined(__x86_64__) && defined(__GNUC__)
/* gp_sum_512 is sk_block_gpool's sum of a plane, bit for bit: the
 * GP_LANES running sums as four vectors (the last values added to their
 * lanes only, as the scalar tail adds them), then the same tree, halves
 * added by shuffles: some 15 instructions a plane where the compiler's
 * loops spent over a hundred on the 7x7 planes of a classifier's head
 * (MobileNetV2's 1280 of them, 5x ONNX Runtime's time at batch 8). */
__attribute__((target("avx512f"))) static float gp_sum_512(const float *x, int64_t HW)
{
	__m512 a[4];
	for (int m = 0; m < 4; m++)
		a[m] = _mm512_setzero_ps();
	int64_t i = 0;
	for (; i + GP_LANES <= HW; i += GP_LANES)
		for (int m = 0; m < 4; m++)
			a[m] = _mm512_add_ps(a[m], _mm512_loadu_ps(x + i + 16 * m));
	for (int m = 0; m < 4 && i + 16 * m < HW; m++) {
		int64_t n = SK_MIN(HW - i - 16 * m, 16);
		__mmask16 k = (__mmask16)((1u << n) - 1);
		a[m] = _mm512_mask_add_ps(a[m], k, a[m], _mm512_maskz_loadu_ps(k, x + i + 16 * m));
	}
	__m512 s = _mm512_add_ps(a[0], a[2]); /* w = 32: lanes 0..15 */
	__m512 t = _mm512_add_ps(a[1], a[3]); /* lanes 16..31 */
	s = _mm512_add_ps(s, t);	      /* w = 16 */
	s = _mm512_add_ps(s, _mm512_shuffle_f32x4(s, s, 0xee)); /* w = 8 */
	s = _mm512_add_ps(s, _mm512_shuffle_f32x4(s, s, 0x01)); /* w = 4 */
	s = _mm512_add_ps(s, _mm512_permute_ps(s, 0xee));	     /* w = 2 */
	s = _mm512_add_ps(s, _mm512_permute_ps(s, 0x01));	     /* w = 1 */
	return _mm512_cvtss_f32(s);
}
#endif

SK_MV void sk_block_gpool(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	int64_t HW = k->p[1], ct = k->t[0];
	int64_t c0 = blk * ct, c1 = SK_MIN(c0 + ct, k->p[0]);
	(void)ctx;
	int wide = 0;
#if defined(__x86_64__) && defined(__GNUC__)
	wide = sk_gemm_isa() == SK_ISA_AVX512;
#endif
	for (int64_t c = c0; c < c1; c++) {
		const float *x = k->in[0] + c * HW;
		if (k->p[2] == 0) {
			float m = x[0];
			for (int64_t i = 1; i < HW; i++)
				m = x[i] > m ? x[i] : m;
			k->out[c] = m;
		} else if (wide) {
#if defined(__x86_64__) && defined(__GNUC__)
			k->out[c] = gp_sum_512(x, HW) / (float)HW;
#endif
		} else {
			/* GP_LANES running sums (value i goes to sum i % GP_LANES),
			 * then a fixed tree: independent chains a compiler
			 * vectorises without changing any sum's order, so every
			 * instruction set gives these bits (one chain of HW
			 * additions waited on each one's latency) */
			k->out[c] = sk_sum_lanes(x, HW, GP_LANES) / (float)HW;
		}
	}
}
