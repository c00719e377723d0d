/*
 * sgemm.c: sluice's own single-precision GEMM, the one core under GEMM,
 * CONV and Winograd blocks.
 *
 * Determinism by construction: every element of C is one chain of fused
 * multiply-adds over k in increasing order, starting from 0.0f (or, when
 * accumulating, from the value C already holds, which is exactly where an
 * earlier call over a leading range of k stopped). Tiles, blocks, row and
 * column splits, K splits, preemption and restore, and the instruction set
 * (AVX-512, AVX2+FMA, or the portable fmaf fallback) all compute the same
 * chain for each element, so they give the same bits. OpenBLAS does not:
 * its kernels change the summation order with the tile's shape.
 *
 * Layout: B is read a micro-panel (KC x NR) at a time, in place where the
 * panel is full and the instruction set reads it as fast so
 * (sk_gemm_impl.unpacked), else packed (zero-padded) into a buffer on the
 * stack; A is read in place (a row of A or, transposed, a column: packing
 * it as well made no product faster on a Zen 5 VM and most slower). The
 * micro-kernels keep an MR x NR tile of C in registers.
 */
#include "sluice_cpu.h"
#include "sk512.h"

#include <math.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SK_X86 1
#else
#define SK_X86 0
#endif

/* A(i, k) is A[i * rsa + k * csa]. m <= MR rows, n <= NR columns of C
 * (columns past n are computed on zero padding and never stored). */
typedef void (*sk_ukern_fn)(int64_t m, int64_t n, int64_t kc, const float *A,
			    int64_t rsa, int64_t csa, const float *Bp, int64_t ldbp,
			    float *C, int64_t ldc, int acc);

typedef struct sk_gemm_impl {
	const char *name;
	int mr, nr, kc, mc;
	sk_ukern_fn uk;
	/* pack copies kc rows of B (ldb apart, n <= nr floats each) into a
	 * panel of kc rows of nr floats, zero past n */
	void (*pack)(const float *b, int64_t ldb, int64_t kc, int64_t n, float *bp);
	/* unpacked: full panels of B are read where they lie whatever M is
	 * (else only when M is one row group, which would read a packed
	 * copy once). AVX-512 only: its two vector loads a row of the panel
	 * stream from L2 as fast as from a packed copy, and the copy is work
	 * of its own (BenchmarkGemm, Zen 5 VM: 0-12% faster unpacked on every
	 * shape measured, BERT's products with a row stride of a multiple of
	 * 4 KiB included); the AVX2 kernel's one load a row lost up to 15% on
	 * those products. */
	int unpacked;
} sk_gemm_impl;

#define KC_MAX 256
#define NR_MAX 32

/* ---- portable: one fmaf per multiply-add ------------------------------ */

#define GEN_MR 4
#define GEN_NR 16

static void uk_generic(int64_t m, int64_t n, int64_t kc, const float *A,
		       int64_t rsa, int64_t csa, const float *Bp, int64_t ldbp, float *C,
		       int64_t ldc, int acc)
{
	float c[GEN_MR][GEN_NR];
	for (int64_t r = 0; r < m; r++)
		for (int64_t j = 0; j < GEN_NR; j++)
			c[r][j] = acc && j < n ? C[r * ldc + j] : 0.0f;
	for (int64_t k = 0; k < kc; k++) {
		const float *b = Bp + k * ldbp;
		for (int64_t r = 0; r < m; r++) {
			float a = A[r * rsa + k * csa];
			for (int64_t j = 0; j < GEN_NR; j++)
				c[r][j] = fmaf(a, b[j], c[r][j]);
		}
	}
	for (int64_t r = 0; r < m; r++)
		for (int64_t j = 0; j < n; j++)
			C[r * ldc + j] = c[r][j];
}

#if SK_X86

/* ---- AVX2 + FMA: 6 x 16 ----------------------------------------------- */

#define AVX2_MR 6

#define SK_AVX2 __attribute__((target("avx2,fma")))
#define SK_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define SK_INLINE static inline __attribute__((always_inline))

SK_AVX2 SK_INLINE void uk_avx2_m(const int MR, int64_t n, int64_t kc, const float *A,
				 int64_t rsa, int64_t csa, const float *Bp, int64_t ldbp, float *C,
				 int64_t ldc, int acc)
{
	__m256 c0[AVX2_MR], c1[AVX2_MR];
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	__m256i k0 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)SK_MIN(n, 8)), lane);
	__m256i k1 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)SK_MAX(n - 8, 0)), lane);
#pragma GCC unroll 8
	for (int r = 0; r < MR; r++) {
		if (acc) {
			c0[r] = _mm256_maskload_ps(C + r * ldc, k0);
			c1[r] = _mm256_maskload_ps(C + r * ldc + 8, k1);
		} else {
			c0[r] = _mm256_setzero_ps();
			c1[r] = _mm256_setzero_ps();
		}
	}
	for (int64_t k = 0; k < kc; k++) {
		__m256 b0 = _mm256_loadu_ps(Bp + k * ldbp);
		__m256 b1 = _mm256_loadu_ps(Bp + k * ldbp + 8);
		const float *a = A + k * csa;
#pragma GCC unroll 8
		for (int r = 0; r < MR; r++) {
			__m256 av = _mm256_broadcast_ss(a + r * rsa);
			c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
			c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
		}
	}
#pragma GCC unroll 8
	for (int r = 0; r < MR; r++) {
		_mm256_maskstore_ps(C + r * ldc, k0, c0[r]);
		_mm256_maskstore_ps(C + r * ldc + 8, k1, c1[r]);
	}
}

SK_AVX2 static void uk_avx2(int64_t m, int64_t n, int64_t kc, const float *A,
			    int64_t rsa, int64_t csa, const float *Bp, int64_t ldbp, float *C,
			    int64_t ldc, int acc)
{
	switch (m) {
	case 6: uk_avx2_m(6, n, kc, A, rsa, csa, Bp, ldbp, C, ldc, acc); break;
	case 5: uk_avx2_m(5, n, kc, A, rsa, csa, Bp, ldbp, C, ldc, acc); break;
	case 4: uk_avx2_m(4, n, kc, A, rsa, csa, Bp, ldbp, C, ldc, acc); break;
	case 3: uk_avx2_m(3, n, kc, A, rsa, csa, Bp, ldbp, C, ldc, acc); break;
	case 2: uk_avx2_m(2, n, kc, A, rsa, csa, Bp, ldbp, C, ldc, acc); break;
	default: uk_avx2_m(1, n, kc, A, rsa, csa, Bp, ldbp, C, ldc, acc); break;
	}
}

/* ---- AVX-512: 12 x 32 ------------------------------------------------- */

#define AVX512_MR 12

SK_AVX512 SK_INLINE void uk_avx512_m(const int MR, int64_t n, int64_t kc,
				     const float *A, int64_t rsa, int64_t csa,
				     const float *Bp, int64_t ldbp, float *C, int64_t ldc, int acc)
{
	__m512 c0[AVX512_MR], c1[AVX512_MR];
	__mmask16 k0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
	__mmask16 k1 = n >= 32 ? 0xffff : n > 16 ? (__mmask16)((1u << (n - 16)) - 1) : 0;
#pragma GCC unroll 16
	for (int r = 0; r < MR; r++) {
		if (acc) {
			c0[r] = _mm512_maskz_loadu_ps(k0, C + r * ldc);
			c1[r] = _mm512_maskz_loadu_ps(k1, C + r * ldc + 16);
		} else {
			c0[r] = _mm512_setzero_ps();
			c1[r] = _mm512_setzero_ps();
		}
	}
	for (int64_t k = 0; k < kc; k++) {
		__m512 b0 = _mm512_loadu_ps(Bp + k * ldbp);
		__m512 b1 = _mm512_loadu_ps(Bp + k * ldbp + 16);
		const float *a = A + k * csa;
#pragma GCC unroll 16
		for (int r = 0; r < MR; r++) {
			__m512 av = _mm512_set1_ps(a[r * rsa]);
			c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
			c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
		}
	}
#pragma GCC unroll 16
	for (int r = 0; r < MR; r++) {
		_mm512_mask_storeu_ps(C + r * ldc, k0, c0[r]);
		_mm512_mask_storeu_ps(C + r * ldc + 16, k1, c1[r]);
	}
}

/* n <= 16: half the work (the upper half of a 32-wide panel is padding) */
SK_AVX512 SK_INLINE void uk_avx512_h(const int MR, int64_t n, int64_t kc,
				     const float *A, int64_t rsa, int64_t csa,
				     const float *Bp, int64_t ldbp, float *C, int64_t ldc, int acc)
{
	__m512 c0[AVX512_MR];
	__mmask16 k0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
#pragma GCC unroll 16
	for (int r = 0; r < MR; r++)
		c0[r] = acc ? _mm512_maskz_loadu_ps(k0, C + r * ldc) : _mm512_setzero_ps();
	for (int64_t k = 0; k < kc; k++) {
		__m512 b0 = _mm512_loadu_ps(Bp + k * ldbp);
		const float *a = A + k * csa;
#pragma GCC unroll 16
		for (int r = 0; r < MR; r++)
			c0[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * rsa]), b0, c0[r]);
	}
#pragma GCC unroll 16
	for (int r = 0; r < MR; r++)
		_mm512_mask_storeu_ps(C + r * ldc, k0, c0[r]);
}

#define UK512_CASE(M)                                                          \
	case M:                                                                \
		if (n > 16)                                                    \
			uk_avx512_m(M, n, kc, A, rsa, csa, Bp, ldbp, C, ldc, acc);   \
		else                                                           \
			uk_avx512_h(M, n, kc, A, rsa, csa, Bp, ldbp, C, ldc, acc);   \
		break;

SK_AVX512 static void uk_avx512(int64_t m, int64_t n, int64_t kc, const float *A,
				int64_t rsa, int64_t csa, const float *Bp, int64_t ldbp, float *C,
				int64_t ldc, int acc)
{
	switch (m) {
	UK512_CASE(12)
	UK512_CASE(11)
	UK512_CASE(10)
	UK512_CASE(9)
	UK512_CASE(8)
	UK512_CASE(7)
	UK512_CASE(6)
	UK512_CASE(5)
	UK512_CASE(4)
	UK512_CASE(3)
	UK512_CASE(2)
	default:
		UK512_CASE(1)
	}
}

#endif /* SK_X86 */

/* ---- packing B's rows (sk_gemm_impl.pack) ----------------------------- */

static void pack_rows_generic(const float *b, int64_t ldb, int64_t kc, int64_t n, float *bp)
{
	for (int64_t k = 0; k < kc; k++) {
		memcpy(bp + k * GEN_NR, b + k * ldb, (size_t)n * 4);
		for (int64_t j = n; j < GEN_NR; j++)
			bp[k * GEN_NR + j] = 0.0f;
	}
}

#if SK_X86
/* pack_rows_avx512 / pack_rows_avx2: a 32 / 16 wide panel, one masked
 * load and store per vector (zero past n), where a memcpy call per row
 * cost more than the copy. */
SK_AVX512 static void pack_rows_avx512(const float *b, int64_t ldb, int64_t kc,
				       int64_t n, float *bp)
{
	__mmask16 k0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
	__mmask16 k1 = n >= 32 ? 0xffff : n > 16 ? (__mmask16)((1u << (n - 16)) - 1) : 0;
	for (int64_t k = 0; k < kc; k++) {
		_mm512_store_ps(bp + k * 32, _mm512_maskz_loadu_ps(k0, b + k * ldb));
		_mm512_store_ps(bp + k * 32 + 16, _mm512_maskz_loadu_ps(k1, b + k * ldb + 16));
	}
}

SK_AVX2 static void pack_rows_avx2(const float *b, int64_t ldb, int64_t kc, int64_t n,
				   float *bp)
{
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	__m256i k0 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)SK_MIN(n, 8)), lane);
	__m256i k1 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)SK_MAX(n - 8, 0)), lane);
	for (int64_t k = 0; k < kc; k++) {
		_mm256_store_ps(bp + k * 16, _mm256_maskload_ps(b + k * ldb, k0));
		_mm256_store_ps(bp + k * 16 + 8, _mm256_maskload_ps(b + k * ldb + 8, k1));
	}
}
#endif

static const sk_gemm_impl impls[SK_ISA_COUNT] = {
	[SK_ISA_GENERIC] = {"generic", GEN_MR, GEN_NR, 256, 64, uk_generic, pack_rows_generic, 0},
#if SK_X86
	[SK_ISA_AVX2] = {"avx2", AVX2_MR, 16, 256, 96, uk_avx2, pack_rows_avx2, 0},
	[SK_ISA_AVX512] = {"avx512", AVX512_MR, 32, 256, 96, uk_avx512, pack_rows_avx512, 1},
#endif
};

static int isa_supported(int isa)
{
	if (isa < 0 || isa >= SK_ISA_COUNT || !impls[isa].uk)
		return 0;
#if SK_X86
	__builtin_cpu_init();
	if (isa == SK_ISA_AVX512)
		return __builtin_cpu_supports("avx512f");
	if (isa == SK_ISA_AVX2)
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
	return isa == SK_ISA_GENERIC;
}

/* the chosen implementation; -1 until the first call picks the best */
static int cur_isa = -1;

static int best_isa(void)
{
	for (int isa = SK_ISA_COUNT - 1; isa > 0; isa--)
		if (isa_supported(isa))
			return isa;
	return SK_ISA_GENERIC;
}

int sk_gemm_isa(void)
{
	int isa = __atomic_load_n(&cur_isa, __ATOMIC_RELAXED);
	if (isa < 0) {
		isa = best_isa();
		__atomic_store_n(&cur_isa, isa, __ATOMIC_RELAXED);
	}
	return isa;
}

int sk_gemm_set_isa(int isa)
{
	if (isa < 0)
		isa = best_isa();
	if (!isa_supported(isa))
		return SK_ERR;
	__atomic_store_n(&cur_isa, isa, __ATOMIC_RELAXED);
	return SK_OK;
}

int sk_gemm_isa_supported(int isa) { return isa_supported(isa); }

const char *sk_gemm_isa_name(int isa)
{
	return isa >= 0 && isa < SK_ISA_COUNT && impls[isa].name ? impls[isa].name : "";
}


#if SK_X86
/* pack_t_avx512 is pack_b for B transposed (B(k, j) = B[j * ldb + k]) on
 * AVX-512: 16 x 16 squares, each 16 of B's rows loaded as vectors and
 * transposed in registers, so the panel is written a vector at a time
 * (a transformer's K read through a view, matmulViews) */
SK_AVX512 static void pack_t_avx512(const float *B, int64_t ldb, int64_t k0, int64_t kc,
				    int64_t j0, int64_t n, float *bp)
{
	for (int64_t jb = 0; jb < 32; jb += 16) {
		for (int64_t kb = 0; kb < kc; kb += 16) {
			__mmask16 mk = sk_lanes16(kb, kc);
			__m512 v[16];
			for (int q = 0; q < 16; q++)
				v[q] = jb + q < n ? _mm512_maskz_loadu_ps(mk, B + (j0 + jb + q) * ldb + k0 + kb)
						  : _mm512_setzero_ps();
			sk_transpose16(v);
			for (int r = 0; r < 16; r++)
				if (kb + r < kc)
					_mm512_store_ps(bp + (kb + r) * 32 + jb, v[r]);
		}
	}
}
#endif

/* pack_b copies B(k0.., j0..) (kc x n) into bp as kc rows of g->nr
 * floats, zero past n. */
static void pack_b(const sk_gemm_impl *g, int tb, const float *B, int64_t ldb, int64_t k0,
		   int64_t kc, int64_t j0, int64_t n, float *bp)
{
	int nr = g->nr;
	if (!tb) {
		g->pack(B + k0 * ldb + j0, ldb, kc, n, bp);
		return;
	}
	/* B(k, j) = B[j * ldb + k] */
#if SK_X86
	if (nr == 32 && g->unpacked) {
		pack_t_avx512(B, ldb, k0, kc, j0, n, bp);
		return;
	}
#endif
	for (int64_t j = 0; j < n; j++) {
		const float *b = B + (j0 + j) * ldb + k0;
		for (int64_t k = 0; k < kc; k++)
			bp[k * nr + j] = b[k];
	}
	for (int64_t j = n; j < nr; j++)
		for (int64_t k = 0; k < kc; k++)
			bp[k * nr + j] = 0.0f;
}

/* row_groups runs the micro-kernel over rows [m0, m0+mc) of one kc x n
 * slice of B (b, ldbp apart): A as rsa and csa say, or (ldpa >= 0) in
 * panels ldpa floats apart, rows from r0, where a row group stays inside
 * one panel (there a row is one float, a step of k a panel's width). */
static inline void row_groups(const sk_gemm_impl *g, const float *A, int64_t rsa, int64_t csa,
			      int64_t ldpa, int64_t r0, int64_t m0, int64_t mc, int64_t k0,
			      int64_t kc, int64_t j0, int64_t n, const float *b, int64_t ldbp,
			      float *C, int64_t ldc, int a)
{
	if (ldpa >= 0) {
		for (int64_t i = m0; i < m0 + mc;) {
			int64_t r = r0 + i, o = r % SK_PANEL;
			int64_t m = SK_MIN(SK_MIN(g->mr, SK_PANEL - o), m0 + mc - i);
			g->uk(m, n, kc, A + (r / SK_PANEL) * ldpa + k0 * SK_PANEL + o, 1, SK_PANEL, b,
			      ldbp, C + i * ldc + j0, ldc, a);
			i += m;
		}
		return;
	}
	for (int64_t i = m0; i < m0 + mc; i += g->mr)
		g->uk(SK_MIN(g->mr, m0 + mc - i), n, kc, A + i * rsa + k0 * csa, rsa, csa, b, ldbp,
		      C + i * ldc + j0, ldc, a);
}

/* gemm_run is sk_gemm, sk_gemm_panels and sk_gemm_apanels: B row-major
 * (ldp < 0: ldb its row stride, tb its transposition) or in SK_PANEL-column
 * panels ldp floats apart (read where they lie, never packed); A as ta and
 * lda say (ldpa < 0) or, transposed, in panels ldpa floats apart, this
 * call's rows starting at row r0 of them. */
static void gemm_run(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
		     int64_t lda, int64_t ldpa, int64_t r0, const float *B, int64_t ldb,
		     int64_t ldp, float *C, int64_t ldc, int acc)
{
	if (M <= 0 || N <= 0)
		return;
	if (K <= 0) {
		if (!acc)
			for (int64_t i = 0; i < M; i++)
				memset(C + i * ldc, 0, (size_t)N * 4);
		return;
	}
	const sk_gemm_impl *g = &impls[sk_gemm_isa()];
	int64_t rsa = ta ? 1 : lda, csa = ta ? lda : 1;
	if (ldp >= 0) {
		/* B in panels: a panel's kc slices lie one after the other, so
		 * walking each panel's whole reduction before the next panel
		 * reads B as one run (a constant streamed from memory); the
		 * slices of A are read again per panel, from cache. Each element
		 * of C still takes its chain over k in order: the same bits. A
		 * panel holds SK_PANEL columns, zero past N: every micro-kernel
		 * width divides it. */
		for (int64_t m0 = 0; m0 < M; m0 += g->mc) {
			int64_t mc = SK_MIN(g->mc, M - m0);
			for (int64_t j0 = 0; j0 < N; j0 += g->nr) {
				int64_t n = SK_MIN(g->nr, N - j0);
				for (int64_t k0 = 0; k0 < K; k0 += g->kc)
					row_groups(g, A, rsa, csa, ldpa, r0, m0, mc, k0,
						   SK_MIN(g->kc, K - k0), j0, n,
						   B + (j0 / SK_PANEL) * ldp + k0 * SK_PANEL + j0 % SK_PANEL,
						   SK_PANEL, C, ldc, acc || k0 > 0);
			}
		}
		return;
	}
	float bp[KC_MAX * NR_MAX] __attribute__((aligned(64)));
	if (tb) {
		/* B transposed is packed a scalar at a time: once per panel
		 * slice, for every row of A (the row blocks inside), where the
		 * order below packed it again for each block of mc rows */
		for (int64_t k0 = 0; k0 < K; k0 += g->kc) {
			int64_t kc = SK_MIN(g->kc, K - k0);
			for (int64_t j0 = 0; j0 < N; j0 += g->nr) {
				int64_t n = SK_MIN(g->nr, N - j0);
				pack_b(g, tb, B, ldb, k0, kc, j0, n, bp);
				for (int64_t m0 = 0; m0 < M; m0 += g->mc)
					row_groups(g, A, rsa, csa, ldpa, r0, m0, SK_MIN(g->mc, M - m0), k0,
						   kc, j0, n, bp, g->nr, C, ldc, acc || k0 > 0);
			}
		}
		return;
	}
	int direct = g->unpacked || M <= g->mr;
	for (int64_t k0 = 0; k0 < K; k0 += g->kc) {
		int64_t kc = SK_MIN(g->kc, K - k0);
		int a = acc || k0 > 0;
		for (int64_t m0 = 0; m0 < M; m0 += g->mc) {
			int64_t mc = SK_MIN(g->mc, M - m0);
			for (int64_t j0 = 0; j0 < N; j0 += g->nr) {
				int64_t n = SK_MIN(g->nr, N - j0);
				const float *b = bp;
				int64_t ldbp = g->nr;
				if (direct && n == g->nr) {
					/* see sk_gemm_impl.unpacked */
					b = B + k0 * ldb + j0;
					ldbp = ldb;
				} else {
					pack_b(g, tb, B, ldb, k0, kc, j0, n, bp);
				}
				row_groups(g, A, rsa, csa, ldpa, r0, m0, mc, k0, kc, j0, n, b, ldbp,
					   C, ldc, a);
			}
		}
	}
}

void sk_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
	     int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, int acc)
{
	gemm_run(ta, tb, M, N, K, A, lda, -1, 0, B, ldb, -1, C, ldc, acc);
}

void sk_gemm_apanels(int64_t M, int64_t N, int64_t K, const float *Ap, int64_t ldpa, int64_t r0,
		     const float *B, int64_t ldb, float *C, int64_t ldc, int acc)
{
	gemm_run(0, 0, M, N, K, Ap, 0, ldpa, r0, B, ldb, -1, C, ldc, acc);
}

void sk_gemm_panels(int ta, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
		    const float *Bp, int64_t ldp, float *C, int64_t ldc, int acc)
{
	gemm_run(ta, 0, M, N, K, A, lda, -1, 0, Bp, 0, ldp, C, ldc, acc);
}

int sk_gemm_nr(void) { return impls[sk_gemm_isa()].nr; }
