/*
 * gemm.c: batched GEMM through OpenBLAS with the fused epilogue. One block
 * is one (batch, M tile, N tile) and one single-threaded cblas_sgemm call.
 */
#include "sluice_cpu.h"

#include <cblas.h>

void sk_blas_init(void)
{
	/* our pool owns the threads: every sgemm call runs on its caller */
	openblas_set_num_threads(1);
}

/* Work aimed at per block (flops), and the least worth a block. */
#define GEMM_BLOCK_MAX 8e6
#define GEMM_BLOCK_MIN 5e5
#define GEMM_TILE_MAX 32768.0 /* floats of C per block (128 KiB) */

void sk_prep_gemm(sk_kernel *k, int units)
{
	int64_t M = k->p[0], N = k->p[1], K = k->p[2];
	int64_t nb = k->p[8] * k->p[9] * k->p[10];
	if (M < 1 || N < 1 || K < 0 || nb < 1) {
		k->grid = -1;
		return;
	}
	double work = 2.0 * (double)M * (double)N * (double)(K ? K : 1);
	double total = work * (double)nb;
	double want = total / GEMM_BLOCK_MAX;
	if (want < units * 4)
		want = units * 4;
	if (want > total / GEMM_BLOCK_MIN)
		want = total / GEMM_BLOCK_MIN;
	if (want < 1)
		want = 1;
	int64_t per = (int64_t)(want / (double)nb + 0.999);
	if (per < 1)
		per = 1;
	/* split N first (keeps A, often the weights, whole), then M */
	int64_t nt = N, mt = M;
	if (per > 1) {
		nt = SK_CDIV(N, per);
		if (nt < 64)
			nt = 64;
		nt = SK_CDIV(nt, 16) * 16;
		if (nt > N)
			nt = N;
		int64_t ntiles = SK_CDIV(N, nt);
		if (ntiles < per) {
			int64_t mtiles = SK_CDIV(per, ntiles);
			mt = SK_CDIV(M, mtiles);
			if (mt < 16)
				mt = 16;
			mt = SK_CDIV(mt, 8) * 8;
			if (mt > M)
				mt = M;
		}
	}
	/* keep the output tile cache-resident for the epilogue */
	while ((double)mt * (double)nt > GEMM_TILE_MAX && nt > 128) {
		nt = SK_CDIV(nt / 2, 16) * 16;
	}
	while ((double)mt * (double)nt > GEMM_TILE_MAX && mt > 64) {
		mt = SK_CDIV(mt / 2, 8) * 8;
	}
	k->t[0] = mt;
	k->t[1] = nt;
	k->t[2] = SK_CDIV(M, mt);
	k->t[3] = SK_CDIV(N, nt);
	k->grid = nb * k->t[2] * k->t[3];
}

void sk_block_gemm(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	const int64_t *p = k->p;
	int64_t M = p[0], N = p[1], K = p[2];
	int ta = (int)p[3], tb = (int)p[4];
	int64_t lda = p[5], ldb = p[6], ldc = p[7];
	int64_t mt = k->t[0], nt = k->t[1], mtiles = k->t[2], ntiles = k->t[3];
	int64_t ni = blk % ntiles;
	int64_t mi = (blk / ntiles) % mtiles;
	int64_t b = blk / (ntiles * mtiles);
	int64_t b2 = b % p[10], b1 = (b / p[10]) % p[9], b0 = b / (p[10] * p[9]);
	int64_t offa = b0 * p[11] + b1 * p[12] + b2 * p[13];
	int64_t offb = b0 * p[14] + b1 * p[15] + b2 * p[16];
	int64_t offc = b0 * p[17] + b1 * p[18] + b2 * p[19];
	int64_t offbias = b0 * p[20] + b1 * p[21] + b2 * p[22];
	int64_t m0 = mi * mt, n0 = ni * nt;
	int64_t ml = SK_MIN(mt, M - m0), nl = SK_MIN(nt, N - n0);
	const float *A = k->in[0] + offa + (ta ? m0 : m0 * lda);
	const float *B = k->in[1] + offb + (tb ? n0 * ldb : n0);
	float *C = k->out + offc + m0 * ldc + n0;
	SK_POLL(ctx);
	if (K > 0) {
		cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
			    tb ? CblasTrans : CblasNoTrans, (int)ml, (int)nl,
			    (int)K, k->f[0], A, (int)lda, B, (int)ldb, 0.0f, C,
			    (int)ldc);
	} else {
		for (int64_t r = 0; r < ml; r++)
			for (int64_t c = 0; c < nl; c++)
				C[r * ldc + c] = 0;
	}
	SK_POLL(ctx);
	const float *bias = k->in[2];
	const float *brow = NULL, *bcol = NULL;
	if (bias && p[23] == 1)
		brow = bias + offbias + m0;
	else if (bias && p[23] == 2)
		bcol = bias + offbias + n0;
	const float *res = k->in[3] ? k->in[3] + offc + m0 * ldc + n0 : NULL;
	if (brow || bcol || res || p[SKP_ACT])
		sk_epilogue(C, ml, nl, ldc, brow, bcol, res, ldc, (int)p[SKP_ACT],
			    k->f[SKF_ACT_A], k->f[SKF_ACT_B]);
}
