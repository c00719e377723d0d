/*
 * sluice_cpu.h: the CPU engine's kernels and worker-pool runtime, the one
 * header the Go side (package sluice/native/cpu) sees.
 *
 * Execution model (ARCHITECTURE.md §3, REEF §2.1/§4):
 *   - a kernel (sk_kernel) is a grid of independent blocks; every block
 *     writes a disjoint tile of the output and is idempotent;
 *   - units (pinned worker pthreads of an sk_pool) execute blocks;
 *   - a stream (sk_stream) = {preemption flag, execution index, queue of
 *     launched kernels}; sk_launch appends a kernel, kernels of one stream run
 *     in order, blocks of one kernel run in parallel on the units named by the
 *     launch's unit mask;
 *   - every block starts with the preemption prologue: if the stream's flag is
 *     set the block exits at once (lazy eviction), else it records the
 *     kernel's execution index. Long blocks poll the flag in their loops
 *     (SK_POLL). Building with -DSK_CHECKS=0 compiles the prologue and the
 *     polls out (used by the overhead benchmark only).
 *
 * All float tensors are float32, NCHW, contiguous unless a kernel says
 * otherwise. Every pointer a kernel holds is C memory.
 */
#ifndef SLUICE_CPU_H
#define SLUICE_CPU_H

/* No contraction of a * b + c into fused multiply-adds: every clone of a
 * kernel (SK_MV) computes the same bits on every CPU. Where a kernel wants
 * fused multiply-adds it writes them (sgemm.c). */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* Kernels never read errno nor rely on floating-point traps; without these
 * GCC cannot if-convert float selects, and the activation loops (erf, exp,
 * clamps) stay scalar. cgo's flag allow-list has no -fno-trapping-math. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#endif

#ifndef SK_CHECKS
#define SK_CHECKS 1
#endif

#define SK_MAX_IN 8
#define SK_NP 32
#define SK_NF 8
#define SK_NT 8
#define SK_MAX_UNITS 64
#define SK_MAX_RANK 6

/* Kernel operations. Keep in step with libml/engine/ops.go. */
enum sk_op {
	SK_OP_NOP = 0,
	SK_OP_GEMM = 1,      /* batched C = act(alpha*op(A)op(B) + bias + res) */
	SK_OP_CONV = 2,      /* conv with im2col per output tile + sgemm */
	SK_OP_IM2COL = 3,    /* im2col into a workspace (small outputs) */
	SK_OP_DWCONV = 4,    /* depthwise conv, direct */
	SK_OP_COL2IM = 5,    /* gather form of col2im (ConvTranspose) */
	SK_OP_POOL = 6,      /* max / average pooling */
	SK_OP_GPOOL = 7,     /* global average / max pooling */
	SK_OP_UNARY = 8,     /* elementwise unary (activation codes) */
	SK_OP_BINARY = 9,    /* broadcasting binary, rank <= 6 */
	SK_OP_CHAFFINE = 10, /* per-channel y = x*scale[c] + shift[c] (BN) */
	SK_OP_SOFTMAX = 11,  /* softmax / log-softmax over one axis */
	SK_OP_LAYERNORM = 12,/* layer normalization over the last dims */
	SK_OP_REDUCE = 13,   /* reduce over one (flattened) axis */
	SK_OP_COPY = 14,     /* strided copy rank <= 6 (transpose, slice, concat, expand) */
	SK_OP_RESIZE = 15,   /* 2-D resize, nearest / linear */
	SK_OP_GATHER = 16,   /* gather along an axis with constant indices */
	SK_OP_QUANT = 17,    /* quantise / dequantise (integers stored as float) */
	SK_OP_QGEMM = 18,    /* integer GEMM, exact int32 sums (quant.c) */
	SK_OP_GRIDSAMPLE = 19, /* GridSample: bilinear / nearest / bicubic */
	SK_OP_TOPK = 20,     /* TopK: values or indices of the k best */
	SK_OP_ROIALIGN = 21, /* RoiAlign: bilinear bins of regions */
	SK_OP_DET = 22,      /* Det: determinants of square matrices */
	SK_OP_COUNT = 23
};

/* Activation / unary codes (p[SKP_ACT] of fused epilogues, SK_OP_UNARY). */
enum sk_act {
	SK_ACT_NONE = 0,
	SK_ACT_RELU = 1,
	SK_ACT_CLIP = 2,        /* min f[A], max f[B] */
	SK_ACT_SIGMOID = 3,
	SK_ACT_HARDSIGMOID = 4, /* max(0, min(1, a*x+b)) */
	SK_ACT_HARDSWISH = 5,
	SK_ACT_TANH = 6,
	SK_ACT_GELU = 7,        /* erf form */
	SK_ACT_GELU_TANH = 8,
	SK_ACT_LEAKYRELU = 9,   /* alpha f[A] */
	SK_ACT_EXP = 10,
	SK_ACT_LOG = 11,
	SK_ACT_NEG = 12,
	SK_ACT_ABS = 13,
	SK_ACT_SQRT = 14,
	SK_ACT_RECIP = 15,
	SK_ACT_ERF = 16,
	SK_ACT_FLOOR = 17,
	SK_ACT_CEIL = 18,
	SK_ACT_POWC = 19,       /* x^f[A] */
	SK_ACT_AFFINE = 20,     /* f[A]*x + f[B] */
	SK_ACT_SOFTPLUS = 21,
	SK_ACT_ELU = 22,        /* alpha f[A] */
	SK_ACT_IDENTITY = 23,
	SK_ACT_ROUND = 24,
	SK_ACT_SIN = 25,
	SK_ACT_COS = 26,
	SK_ACT_F16 = 27,        /* round to the nearest float16, to nearest even */
	SK_ACT_SINH = 28,
	SK_ACT_ASINH = 29,
	SK_ACT_ATANH = 30,
	SK_ACT_ASIN = 31,
	SK_ACT_ACOS = 32,
	SK_ACT_ATAN = 33,
	SK_ACT_SIGN = 34,
	SK_ACT_THRESHRELU = 35, /* x > f[A] ? x : 0 */
	SK_ACT_SHRINK = 36,     /* x < -f[A] ? x + f[B] : x > f[A] ? x - f[B] : 0 */
	SK_ACT_COUNT = 37
};

/* Binary codes (SK_OP_BINARY p[0]). */
enum sk_binop {
	SK_BIN_ADD = 0,
	SK_BIN_SUB = 1,
	SK_BIN_MUL = 2,
	SK_BIN_DIV = 3,
	SK_BIN_POW = 4,
	SK_BIN_MAX = 5,
	SK_BIN_MIN = 6,
	SK_BIN_PRELU = 7, /* x < 0 ? x*z : x */
	SK_BIN_GREATER = 8, /* comparisons: 1 or 0 (a bool tensor's values) */
	SK_BIN_LESS = 9,
	SK_BIN_EQUAL = 10,
	SK_BIN_GREATER_EQ = 11,
	SK_BIN_LESS_EQ = 12,
	SK_BIN_MOD = 13, /* fmodf: Mod with fmod = 1 (the dividend's sign) */
	SK_BIN_COUNT = 14
};

/* Reduce codes (SK_OP_REDUCE p[3]). */
enum sk_reduce {
	SK_RED_MEAN = 0,
	SK_RED_SUM = 1,
	SK_RED_MAX = 2,
	SK_RED_MIN = 3,
	SK_RED_PROD = 4,
	SK_RED_SUMSQ = 5,
	SK_RED_L2 = 6,
	SK_RED_COUNT = 7
};

/* Slots shared by every kernel with a fused epilogue. */
#define SKP_ACT 31
/* How a kernel's arena operands are stored (enum sk_store), 2 bits each:
 * the output's in bits 0-1, in[j]'s in bits 2+2j. 8-bit integer tensors
 * may be stored as bytes (element i at byte i of the operand) instead of
 * float32 values; only these take them: QUANT's input (modes 1 and 5, and
 * mode 5's in[3]) and output (modes 0, 4, 5), QGEMM's A (unpacked), B
 * (unpacked, or its im2col) and requantised Y, integer DWCONV's input and
 * requantised output. The bits are the float path's. */
#define SKP_STORE 30
/* GEMM: B is stored in panels (sk_gemm_panels; ldb their distance); A
 * is, transposed (sk_gemm_apanels; lda their distance); the product is
 * computed transposed, C^T = B^T A^T, with A in panels. */
#define SKP_GEMM_PANELS 24
#define SKP_GEMM_APANELS 25
#define SKP_GEMM_TPROD 26
/* CONV (direct, not Winograd; ungrouped): W stored transposed in panels. */
#define SKP_CONV_WPANELS 17
#define SKF_ACT_A 6
#define SKF_ACT_B 7
/* DWCONV with its input computed in the kernel by a pointwise (1x1)
 * convolution: see the parameter layouts. */
#define SKP_DWP 20
#define SKP_DWP_C0 21
#define SKP_DWP_PANELS 22
#define SKP_DWP_LDA 23
#define SKP_DWP_ACT 24
#define SKI_DWP_W 5
#define SKI_DWP_B 6
#define SKF_DWP_A 2
#define SKF_DWP_B 3

/* Operand storage (p[SKP_STORE]). */
enum sk_store {
	SK_STORE_F32 = 0, /* float32 values */
	SK_STORE_U8 = 1,  /* uint8 values, one byte each */
	SK_STORE_S8 = 2   /* int8 values, one byte each */
};

/* Kernel flags. */
#define SK_KF_INPLACE 1 /* reads and writes the same memory: not idempotent */

/*
 * Parameter layouts (p = int64 params, f = float params, in = inputs):
 *
 * GEMM     in A,B,bias,res. p: 0 M 1 N 2 K 3 transA 4 transB 5 lda 6 ldb
 *          7 ldc 8..10 batch dims 11..13 A batch strides 14..16 B strides
 *          17..19 C strides (res uses the C layout) 20..22 bias strides
 *          23 bias mode (0 none, 1 per row, 2 per column) 24 B in panels
 *          of SK_PANEL columns (sk_gemm_panels: transB 0, ldb the distance
 *          between panels, tiles cut at panel boundaries) 25 A stored
 *          transposed in panels (sk_gemm_apanels: transA 0, lda the
 *          distance between panels) 26 with 25 (and 24 0, transB 0): the
 *          product computed transposed, C^T = B^T A^T, a tile at a time in
 *          the unit's scratch (M tiles cut at panels): the same bits,
 *          faster where N is small (a convolution's few output positions:
 *          the micro-kernel's vectors then run along output channels).
 *          f: 0 alpha.
 * CONV, IM2COL, DWCONV, COL2IM
 *          in X,W,bias,res (COL2IM: in col,bias). p: 0 N 1 C 2 H 3 W 4 Cout
 *          5 G 6 KH 7 KW 8 SH 9 SW 10 PT 11 PL 12 DH 13 DW 14 OH 15 OW.
 *          CONV: 16 Winograd (W its transformed weights) 17 W (Cout x
 *          Kd, G = 1) stored transposed in panels (sk_gemm_apanels).
 *          IM2COL writes col[N][G][C/G*KH*KW][OH*OW], padding with f[0]
 *          (0, or an integer input's zero point). COL2IM reads
 *          col[N][G][Cout/G*KH*KW][H*W] and writes Y[N][Cout][OH][OW].
 *          DWCONV on integers (p[16] = 1): the input is integer values
 *          stored as float less the zero point f[0] (padding reads 0), the
 *          weights and bias already less theirs; with p[17] = 1 each
 *          output channel is requantised in the same pass, QUANT's mode 4:
 *          clamp(rint(y * in[4][oc]) + f[1], p[18], p[19]). No residual
 *          or activation then.
 *          DWCONV with p[20] = 1 (SKP_DWP, float only, Cout = C): its
 *          input is not read but computed, a band of rows at a time in
 *          the unit's scratch, as the pointwise convolution act(W1 x X0 +
 *          b1): in[0] is X0 [N][p[21] = C0][H][W], in[5] W1 (C x C0,
 *          row-major, or with p[22] = 1 stored transposed in panels p[23]
 *          floats apart: sk_gemm_apanels), in[6] b1 (nullable), p[24] the
 *          activation code with f[2], f[3] its parameters. The same bits
 *          as a GEMM kernel writing that input and the DWCONV reading it.
 * POOL     p: 0 planes 1 H 2 W 3 OH 4 OW 5 KH 6 KW 7 SH 8 SW 9 PT 10 PL
 *          11 DH 12 DW 13 mode (0 max, 1 avg) 14 count_include_pad
 *          15 PB 16 PR (for count_include_pad windows).
 * GPOOL    p: 0 planes 1 HW 2 mode (0 max, 1 avg).
 * UNARY    p: 0 n. act in p[SKP_ACT].
 * BINARY   in A,B. p: 0 binop 1 rank 2..7 out dims 8..13 A strides
 *          14..19 B strides (0 where broadcast). act in p[SKP_ACT].
 * CHAFFINE in X,scale,shift. p: 0 N 1 C 2 inner. act in p[SKP_ACT].
 * SOFTMAX  p: 0 outer 1 n 2 inner 3 log.
 * LAYERNORM in X,scale,bias (nullable). p: 0 rows 1 cols. f: 0 eps.
 * REDUCE   p: 0 outer 1 r 2 inner 3 mode.
 * COPY     p: 0 rank 1..6 dims 7..12 in strides 13..18 out strides
 *          19 select: in[2] holds one value that picks the source, in[0]
 *          (nonzero) or in[1] (zero; same layout): an If on a run-time
 *          condition.
 * RESIZE   p: 0 planes 1 H 2 W 3 OH 4 OW 5 mode (0 nearest, 1 linear,
 *          2 cubic)
 *          6 coord (0 half_pixel, 1 asymmetric, 2 align_corners,
 *          3 pytorch_half_pixel, 4 tf_half_pixel_for_nn, 5 tf_crop_and_resize,
 *          6 half_pixel_symmetric)
 *          7 nearest (0 round_prefer_floor,
 *          1 round_prefer_ceil, 2 floor, 3 ceil) 8 exclude_outside (cubic).
 *          f: 0 scale_h 1 scale_w 2 cubic_coeff_a; coord 5: 3 h start 4 h end
 *          5 w start 6 w end (the crop, fractions of the input) 7 the value
 *          of outputs whose source lies outside the input.
 * GATHER   aux = indices. p: 0 outer 1 axis 2 inner 3 nidx.
 * GRIDSAMPLE in X [N,C,H,W], grid [N,OH,OW,2]. p: 0 N 1 C 2 H 3 W 4 OH
 *          5 OW 6 mode (0 bilinear, 1 nearest, 2 bicubic) 7 padding (0
 *          zeros, 1 border, 2 reflection) 8 align_corners.
 * TOPK     p: 0 outer 1 n (the axis) 2 inner 3 k 4 largest 5 indices (1:
 *          write the indices as float32, 0: the values); out [outer,k,inner].
 * ROIALIGN in X [N,C,H,W], rois [R,4], batch indices [R] (float32). p: 0 N
 *          1 C 2 H 3 W 4 R 5 OH 6 OW 7 sampling_ratio (0 adaptive) 8 mode
 *          (0 avg, 1 max) 9 half_pixel. f: 0 spatial_scale.
 * DET      in X [count, M, M]. p: 0 count 1 M (1 .. SK_DET_MAX); out
 *          [count], each by LU with partial pivoting in double.
 * QUANT    in X,scale,zp (zp nullable; both of length C). p: 0 n 1 C
 *          2 inner (channel of element i: (i/inner)%C) 3 mode (0
 *          y = clamp(rint(x/scale)+zp), 1 y = (x-zp)*scale, 2 and 3: one
 *          float, DynamicQuantizeLinear's scale (max(0,max x)-min(0,min x))
 *          /(hi-lo) and zero point clamp(rint(lo - min/scale)), 4
 *          y = clamp(rint(x*scale)+zp): requantise int32 sums, as QGEMM's
 *          epilogue does, 5 y = clamp(rint(((A-za)*sa + (B-zb)*sb)/scale)
 *          +zp): QLinearAdd, with A = X, B = in[3], sa = in[4][0], za =
 *          in[5][0], sb = in[6][0], zb = in[7][0] (za, zb nullable), C = 1,
 *          the sum's activation in p[SKP_ACT] (f[SKF_ACT_A], f[SKF_ACT_B])
 *          before the quantisation: the bits of its DequantizeLinear, Add
 *          and QuantizeLinear apart)
 *          4 lo 5 hi.
 * QGEMM    in A,B,za,zb,mult,bias (integers stored as float; bias int32
 *          bits; za,zb,mult,bias nullable). Y[m,n] = sum_k (A[m,k]-za)
 *          (B[k,n]-zb) (+ bias), as float or requantised clamp(rint(
 *          Y*mult)+f[0], lo, hi). p: 0 M 1 N 2 K 3 lda 4 ldb 5 ldc 6,7 batch
 *          dims 8,9 A strides 10,11 B strides 12,13 Y strides 14,15 strides
 *          of the per-row parameters 16 A is int8 17 B is int8 18 za per
 *          row 19 zb per column 20 mult (0 none, 1 scalar, 2 per row, 3 per
 *          column) 21 bias (0 none, 1 per row, 2 per column) 22 requantise
 *          23 lo 24 hi 25 B is packed (in[1] holds s8 panels of 16
 *          columns x 4 reduction steps of B - 128*(B is uint8), strip-major,
 *          K padded to 4 and N to 16, and in[6] their int32 column sums)
 *          26 A is packed (in[0] holds rows of A + 128*(A is int8) as u8,
 *          K padded to 4, in[7] their int32 row sums; the A strides count
 *          rows) 27 B is the im2col of a convolution's input (in[1] = X,
 *          aux = the 16 convolution parameters, b1 = image, b2 = group;
 *          each block builds its columns, padding with f[1]; 2: and A,
 *          packed (26), holds the weights as B's panels hold B, columns
 *          the output channels, with in[7] their column sums, each
 *          channel's window in (kh, kw, c) order: the product runs
 *          transposed, the output positions as rows (their im2col in the
 *          same order), and Y is stored as ever; one group) 28 Kp: K
 *          padded (to 4, or to 64: whole AMX tiles), the length of packed
 *          rows and panels.
 */

/* A kernel: one launchable unit of work. Filled by the Go side, then
 * sk_kernel_prepare computes the grid and tiling for a unit count. */
typedef struct sk_kernel {
	int32_t op;
	int32_t flags;
	int64_t grid;       /* number of blocks (set by prepare) */
	int64_t scratch;    /* per-unit scratch floats a block needs (prepare) */
	float *out;
	const float *in[SK_MAX_IN];
	const int64_t *aux;
	int64_t p[SK_NP];
	float f[SK_NF];
	int64_t t[SK_NT];   /* tiling (prepare) */
	/* statistics, updated when the stream profiles */
	int64_t stat_blocks;
	int64_t stat_block_ns;
	int64_t stat_runs;
	int64_t stat_wall_ns;
	int64_t stat_t0;
	/* in-loop preemption checks wanted per block (0 or 1: the kernel's
	 * own spacing). The scheduler sets it on the copies of kernels its
	 * preemptible streams run (sk_kernel_set_checks): GEMM and CONV then
	 * split a block's sgemm into about that many calls with a check
	 * between them. */
	int64_t checks;
	/* a bound on the work between two checks, by construction (0: none):
	 * GEMM and CONV split a block's sgemm so that no call does more than
	 * check_flops flops or reads more than check_bytes bytes of its two
	 * operands (at least as many calls as checks; the split's smallest
	 * call, 8 or 16 rows by 64 of the reduction, bounds it from below),
	 * IM2COL writes its columns in pieces of at most check_bytes
	 * (sk_kernel_set_check_work). */
	int64_t check_flops, check_bytes;
} sk_kernel;

/* Per-unit context handed to every block. */
typedef struct sk_ctx {
	int unit;
	const volatile int32_t *flag; /* the stream's preemption flag */
	float *scratch;
	int64_t scratch_cap;
} sk_ctx;

/* Kernel table entries. */
typedef void (*sk_block_fn)(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
typedef void (*sk_prep_fn)(sk_kernel *k, int units);

typedef struct sk_pool sk_pool;
typedef struct sk_stream sk_stream;

/* Status codes. */
#define SK_OK 0
#define SK_PREEMPTED 1
#define SK_ERR -1

/* ---- runtime ---------------------------------------------------------- */

/* sk_pool_create starts units worker threads (pinned to cores round-robin
 * when pin != 0). Returns NULL on failure. */
sk_pool *sk_pool_create(int units, int pin);
/* sk_pool_destroy stops the workers; every stream must be destroyed. */
void sk_pool_destroy(sk_pool *p);
int sk_pool_units(const sk_pool *p);
/* sk_pool_set_nice sets the units' nice value (setpriority on each unit
 * thread), e.g. to let the threads that steer them run first on a small
 * machine. Returns SK_ERR if the system refused. */
int sk_pool_set_nice(sk_pool *p, int nice);
/* sk_kernel_set_checks sets k->checks (clamped to 0..1024). */
void sk_kernel_set_checks(sk_kernel *k, int64_t checks);
/* sk_kernel_set_check_work sets k->check_flops and k->check_bytes (<= 0:
 * no bound). */
void sk_kernel_set_check_work(sk_kernel *k, int64_t flops, int64_t bytes);

/* sk_checks reports whether preemption checks are compiled in. */
int sk_checks(void);

/* sk_stream_create makes a stream whose queue holds up to cap launched
 * kernels (rounded up to a power of two). */
sk_stream *sk_stream_create(sk_pool *p, int cap);
/* sk_stream_destroy frees an idle stream. */
void sk_stream_destroy(sk_stream *s);
/* sk_launch appends kernel k with execution index idx to s, runnable on the
 * units in mask (0 = all). Returns SK_OK, or SK_ERR when the queue is full. */
int sk_launch(sk_stream *s, sk_kernel *k, int64_t idx, uint64_t mask);
/* sk_stream_sync waits until every launched kernel has completed or been
 * evicted; returns SK_OK or SK_PREEMPTED (the flag was set). */
int sk_stream_sync(sk_stream *s);
/* sk_run launches ks[start..n) (execution indices start..n-1) on s, waiting
 * for queue space as needed, then waits: one call per batch inference. */
int sk_run(sk_stream *s, sk_kernel *ks, int n, int start, uint64_t mask);
/* sk_run_inline runs ks[start..n) on the calling thread, block by block in
 * order, with s's flag and execution index as a unit would: no unit is
 * woken and nothing waits. For programs so small that waking the units
 * and waiting for them costs more than their work. Returns SK_OK,
 * SK_PREEMPTED (the flag was set; the execution index says where) or
 * SK_ERR (a kernel was not prepared). */
int sk_run_inline(sk_stream *s, sk_kernel *ks, int n, int start);
/* sk_stream_preempt sets the preemption flag: queued kernels are evicted,
 * running blocks exit at their next check. */
void sk_stream_preempt(sk_stream *s);
/* sk_stream_restore clears the flag (after sync) so the stream runs again. */
void sk_stream_restore(sk_stream *s);
/* sk_stream_flag returns the flag's address (Go may store to it). */
int32_t *sk_stream_flag(sk_stream *s);
/* sk_stream_exec_index is the execution index last recorded by a block
 * prologue (-1 when none ran since the last reset). */
int64_t sk_stream_exec_index(const sk_stream *s);
void sk_stream_reset_index(sk_stream *s);
/* sk_stream_profile turns per-block timing on or off. */
void sk_stream_profile(sk_stream *s, int on);
/* sk_stream_preempt_at is a test hook: the stream preempts itself when the
 * kernel with execution index idx has had blk of its blocks claimed (blk
 * counts claims, which may come from both ends of the kernel, from a
 * launch range's first block: blk 0 stops it before any block runs; idx <
 * 0 disarms). */
void sk_stream_preempt_at(sk_stream *s, int64_t idx, int64_t blk);

/* ---- scheduler support (libml/sched; REEF §4-§5) -------------------------
 *
 * Block ranges, virtual host queues with a device window, O(1) host-queue
 * reset, timestamps and dynamic kernel padding. A stream is either driven
 * by sk_launch / sk_run or, once sk_hq_enable was called, by sk_hq_push
 * only; never both.
 */

/* sk_launch_range appends blocks [blk0, blk1) of kernel k (a kernel whose
 * first blocks already ran continues where it stopped). */
int sk_launch_range(sk_stream *s, sk_kernel *k, int64_t idx, uint64_t mask,
		    int64_t blk0, int64_t blk1);

/* One launch for the host queue. */
typedef struct sk_launch_desc {
	sk_kernel *k;
	int64_t idx;          /* execution index */
	int64_t blk0, blk1;   /* block range; blk1 <= 0: to the end of the grid */
	int64_t est_ns;       /* estimated kernel time (RT kernels: padding) */
	int64_t bw;           /* memory-bandwidth demand, MB/s (padding) */
	int64_t blk_ns;       /* estimated block time (padding: the kernel's tail) */
	uint64_t mask;        /* units (0 = all) */
} sk_launch_desc;

/* sk_hq_enable gives s a virtual host queue: at most window kernels
 * (1 <= window < queue capacity) are in the stream's ring at a time, the
 * rest wait in the host queue. */
int sk_hq_enable(sk_stream *s, int window);
int sk_hq_set_window(sk_stream *s, int window);
/* sk_hq_push appends n launches; it returns the sequence number the first
 * one runs under, or -1 on a bad launch. With mark != 0 the stream records
 * when that first launch starts (sk_stream_mark_ns). */
int64_t sk_hq_push(sk_stream *s, const sk_launch_desc *d, int n, int mark);
/* sk_hq_preempt resets the host queue in O(1) (the detached list is freed
 * by the pool's collector thread) and sets the preemption flag. Returns
 * the monotonic time of the call, in ns. Wait with sk_stream_sync, then
 * read sk_stream_exec_index and sk_stream_restore before pushing again. */
int64_t sk_hq_preempt(sk_stream *s);
/* sk_hq_len is the number of launches waiting in the host queue. */
int64_t sk_hq_len(sk_stream *s);
/* sk_stream_outstanding is the number of ring kernels not yet completed. */
uint32_t sk_stream_outstanding(const sk_stream *s);
/* sk_pool_gc_freed counts host-queue nodes freed by the collector. */
int64_t sk_pool_gc_freed(const sk_pool *p);

/* sk_now_ns is the monotonic clock the timestamps use. */
int64_t sk_now_ns(void);
/* sk_stream_mark_ns is when the kernel marked by sk_hq_push started (its
 * first block was claimed; 0 = not yet). */
int64_t sk_stream_mark_ns(const sk_stream *s);
/* sk_stream_drain_ns is when the stream last became empty (its last
 * running block ended). */
int64_t sk_stream_drain_ns(const sk_stream *s);
/* sk_stream_idle_ns is when, after the flag was set (sk_hq_preempt), the
 * last block running on the stream ended: from then on no unit works for
 * it (the queued kernels are dropped lazily, when a unit passes by). */
int64_t sk_stream_idle_ns(const sk_stream *s);
/* sk_stream_evicted tells where the stream stood when sk_hq_preempt's
 * flag evicted its ring: the execution index of the launch in progress
 * (returned; -1: nothing was evicted), its first block, its block count,
 * first, its first block that did not run to its end (blocks are tracked
 * up to 256: first = 256 when those all did), and end, one past its last
 * block that did not (0 when none; grid when the launch has untracked
 * blocks). Blocks are numbered from the launch's first. */
int64_t sk_stream_evicted(const sk_stream *s, int64_t *base, int64_t *grid,
			  int64_t *first, int64_t *end);
/* sk_stream_set_priority puts s on (on != 0) or off the pool's short list
 * of streams units serve first: a unit takes their blocks before any other
 * stream's, and before it drops the queue of a preempted stream. At most 8
 * streams per pool; SK_ERR when full. */
int sk_stream_set_priority(sk_stream *s, int on);
/* sk_stream_set_notify makes the unit that drains the stream write 1 to
 * the eventfd fd (fd < 0: off), so a waiter can sleep in an event loop
 * instead of a blocking call. */
void sk_stream_set_notify(sk_stream *s, int fd);

/* Dynamic kernel padding. A candidate is one best-effort job offered to
 * the units the RT stream's running kernel leaves idle: its kernels in
 * several versions (tile shapes) with profiled times, and a cursor. */
typedef struct sk_pad_cand {
	/* set by the caller */
	sk_kernel *const *ver;  /* [nk * nver]: kernel k, version v; NULL = none */
	const int64_t *blk_ns;  /* [nk * nver] profiled block time, <= 0 = unknown */
	const int64_t *kern_ns; /* [nk * nver] profiled kernel time */
	const int64_t *bw;      /* [nk * nver] MB/s one block moves */
	int32_t nk, nver;
	/* cursor (set before the candidate is added, then moved by units):
	 * kernel k in version v (-1: not chosen), blocks [0, next) claimed
	 * and [0, done) completed out of grid */
	int32_t k, v;
	int64_t next, done, grid;
	/* statistics */
	int64_t blocks, block_ns;
} sk_pad_cand;

typedef struct sk_pad {
	sk_stream *rt;        /* the RT stream whose kernels are padded */
	sk_pad_cand *cand;    /* cap candidates; [0, ncand) offered, in order */
	int32_t cap, ncand;
	/* rule 2: the RT kernel's demand plus one padding block's must stay
	 * within this many MB/s (<= 0: no limit) */
	int64_t bw_budget;
	/* rule 1 asks for a block time below rule1_pct percent of the RT
	 * kernel's remaining time (<= 0: 100, REEF's rule) */
	int64_t rule1_pct;
	/* statistics */
	int64_t sel_calls, sel_ns, sel_max_ns, sel_over_2us;
	int64_t rule1_rejects, rule2_rejects;
	int32_t lock;
} sk_pad;

/* sk_pad_start makes the pool's units pad the kernels of pad->rt: a unit
 * pads only while the RT stream's running kernel (launched with est_ns > 0)
 * leaves it idle (it is outside the launch's unit mask, or every block of
 * the kernel has been claimed), and only with a block whose profiled time
 * is below the kernel's remaining time (rule 1: the estimate minus the
 * time since the kernel started, and, once every block is claimed, at most
 * the block estimate minus the time since the last claim) and whose bandwidth fits
 * the budget (rule 2). sk_pad_stop returns once no padding block runs;
 * the cursors then say where each candidate stands. */
void sk_pad_start(sk_pool *p, sk_pad *pad);
void sk_pad_stop(sk_pool *p);
/* sk_pad_set copies *src into candidate slot cand and offers it (slots
 * [0, ncand) are offered; a slot with nk = 0 is empty); sk_pad_get reads
 * a slot back. Both may run while padding runs. A slot may be replaced
 * only while no block of it runs: padding stopped, or its cursor past its
 * last kernel. sk_pad_reset withdraws every slot (padding stopped). */
int sk_pad_set(sk_pad *pad, int cand, const sk_pad_cand *src);
int sk_pad_get(sk_pad *pad, int cand, sk_pad_cand *dst);
void sk_pad_reset(sk_pad *pad);
/* sk_pad_select is the selection alone (tests): for an RT kernel with
 * rem_ns left and rt_bw MB/s, it claims a block and returns its candidate
 * (kernel, version, block in *k, *v, *blk), or -1. sk_pad_complete
 * records a claimed block as done. */
int sk_pad_select(sk_pad *pad, int64_t rem_ns, int64_t rt_bw, int32_t *k,
		  int32_t *v, int64_t *blk);
void sk_pad_complete(sk_pad *pad, int cand, int64_t ns);

/* sk_alloc returns bytes of zeroed, 64-byte aligned memory (fresh pages for
 * large sizes, so untouched memory costs no RSS); sk_free releases it. */
void *sk_alloc(size_t bytes);
void sk_free(void *ptr, size_t bytes);

/* ---- kernels ---------------------------------------------------------- */

/* sk_kernel_prepare validates k and computes grid, tiling and scratch for a
 * pool of units. Returns SK_OK or SK_ERR. */
int sk_kernel_prepare(sk_kernel *k, int units);
/* sk_kernel_run_block runs one block of k (the prologue excepted). */
void sk_kernel_run_block(const sk_kernel *k, int64_t blk, sk_ctx *ctx);

/* Kernel families (one file each). */
void sk_prep_gemm(sk_kernel *k, int units);
void sk_block_gemm(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_conv(sk_kernel *k, int units);
void sk_block_conv(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_im2col(sk_kernel *k, int units);
void sk_block_im2col(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_dwconv(sk_kernel *k, int units);
void sk_block_dwconv(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_col2im(sk_kernel *k, int units);
void sk_block_col2im(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_pool(sk_kernel *k, int units);
void sk_block_pool(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_gpool(sk_kernel *k, int units);
void sk_block_gpool(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_unary(sk_kernel *k, int units);
void sk_block_unary(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_binary(sk_kernel *k, int units);
void sk_block_binary(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_chaffine(sk_kernel *k, int units);
void sk_block_chaffine(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_softmax(sk_kernel *k, int units);
void sk_block_softmax(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_layernorm(sk_kernel *k, int units);
void sk_block_layernorm(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_reduce(sk_kernel *k, int units);
void sk_block_reduce(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_copy(sk_kernel *k, int units);
void sk_block_copy(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_resize(sk_kernel *k, int units);
void sk_block_resize(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_gather(sk_kernel *k, int units);
void sk_block_gather(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_gridsample(sk_kernel *k, int units);
void sk_block_gridsample(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_topk(sk_kernel *k, int units);
void sk_block_topk(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
/* The largest matrix DET factorises (its scratch is 8 M^2 bytes a unit). */
#define SK_DET_MAX 1024
void sk_prep_det(sk_kernel *k, int units);
void sk_block_det(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_roialign(sk_kernel *k, int units);
void sk_block_roialign(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_quant(sk_kernel *k, int units);
void sk_block_quant(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
void sk_prep_qgemm(sk_kernel *k, int units);
void sk_block_qgemm(const sk_kernel *k, int64_t blk, sk_ctx *ctx);
/* QUANT modes (p[3]). */
enum sk_quant_mode {
	SK_QUANT_QUANTIZE = 0,   /* clamp(rint(x/scale)+zp) */
	SK_QUANT_DEQUANTIZE = 1, /* (x-zp)*scale */
	SK_QUANT_DYN_SCALE = 2,  /* DynamicQuantizeLinear's scale */
	SK_QUANT_DYN_ZERO = 3,   /* DynamicQuantizeLinear's zero point */
	SK_QUANT_REQUANT = 4,    /* clamp(rint(x*scale)+zp) */
	SK_QUANT_ADD = 5         /* clamp(rint(((a-za)*sa + (b-zb)*sb)/scale)+zp) */
};
/* QGEMM's micro-kernels: the best the CPU has (AMX tiles, VNNI, AVX2, C),
 * portable C, the best without VNNI or AMX (AVX2 where present), the best
 * without AMX. The sums are exact, so every one gives the same bits. */
enum sk_qgemm_kernel {
	SK_QGEMM_BEST = 0,
	SK_QGEMM_PORTABLE = 1,
	SK_QGEMM_NO_VNNI = 2,
	SK_QGEMM_NO_AMX = 3
};
/* sk_qgemm_set_kernel picks QGEMM's micro-kernels (tests, benchmarks). */
void sk_qgemm_set_kernel(int which);
/* sk_qgemm_vnni reports whether the integer kernels use VNNI: the CPU has
 * it and the micro-kernels picked do (QGEMM's, and the depthwise kernel's
 * on bytes, which follows them). */
int sk_qgemm_vnni(void);
/* sk_cpu_vbmi reports whether the CPU has AVX-512 F, BW, VL and VBMI (the
 * byte kernels' permutations: the depthwise and max pooling ones). */
int sk_cpu_vbmi(void);
/* sk_qgemm_amx reports whether the CPU runs QGEMM on AMX tiles. */
int sk_qgemm_amx(void);

/* ---- test hooks (runtime.c): holding a block ------------------------ */

/* sk_stream_hold_at holds the unit that claims block blk of the kernel
 * with execution index idx past its prologue until released (or, with
 * until_flag, until the stream's flag is set); sk_pool_hold_from holds the
 * first block at or past idx on any non-priority stream. Tests script
 * interleavings with them; unarmed they cost one load per block. */
void sk_stream_hold_at(sk_stream *s, int64_t idx, int64_t blk, int until_flag);
void sk_stream_hold_release(sk_stream *s);
/* sk_stream_claims reads how many blocks of the stream's current kernel
 * units claimed from its front and from its back (both 0 when no kernel is
 * current). */
void sk_stream_claims(const sk_stream *s, int64_t *front, int64_t *back);
/* sk_stream_running is the number of the stream's blocks running now (a
 * held one included); a block that ran to its end is marked done before
 * it stops counting. */
int32_t sk_stream_running(const sk_stream *s);
int64_t sk_stream_holds(const sk_stream *s);
int32_t sk_stream_holding(const sk_stream *s);
/* sk_stream_stall_claim holds the next unit that reads the stream's
 * ticket, before it reads the ticket's queue slot, until
 * sk_stream_stall_release: a test makes that unit's ticket stale with it.
 * sk_stream_stalled is 1 while a unit is held; sk_stream_stalls_done
 * counts the held units' claims that ended after their release. */
void sk_stream_stall_claim(sk_stream *s);
void sk_stream_stall_release(sk_stream *s);
int32_t sk_stream_stalled(const sk_stream *s);
int64_t sk_stream_stalls_done(const sk_stream *s);
/* sk_stream_stall_count holds the next unit that counts a finished block
 * of a launch with execution index >= idx, right after its count is added
 * and before the unit learns whether it completed the kernel, until
 * sk_stream_stall_count_release: a test lets the kernel complete and its
 * queue slot be reused meanwhile. sk_stream_count_stalled is 1 while a
 * unit is held; sk_stream_count_stalls_done counts the held units whose
 * count ended after their release. */
void sk_stream_stall_count(sk_stream *s, int64_t idx);
void sk_stream_stall_count_release(sk_stream *s);
int32_t sk_stream_count_stalled(const sk_stream *s);
int64_t sk_stream_count_stalls_done(const sk_stream *s);
void sk_pool_hold_from(sk_pool *p, int64_t idx, int until_flag);
void sk_pool_hold_release(sk_pool *p);
int64_t sk_pool_holds(const sk_pool *p);
int32_t sk_pool_holding(const sk_pool *p);

/* ---- sgemm.c: the GEMM core ------------------------------------------ */

/* Instruction sets the GEMM core has micro-kernels for. */
enum { SK_ISA_GENERIC = 0, SK_ISA_AVX2 = 1, SK_ISA_AVX512 = 2, SK_ISA_COUNT = 3 };

/* sk_gemm computes C (M x N, ldc) = A (M x K) * B (K x N), with
 * A(i, k) = ta ? A[k * lda + i] : A[i * lda + k] and
 * B(k, j) = tb ? B[j * ldb + k] : B[k * ldb + j]. Each element of C is one
 * chain of fused multiply-adds over k = 0, 1, ..., K-1 from 0.0f, or, when
 * acc != 0, from the value C holds (so splitting K into calls with acc set
 * on all but the first gives the same bits as one call). The result does not
 * depend on M, N, how the caller tiles C, or the instruction set. */
void sk_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
	     int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, int acc);
/* SK_PANEL is the column count of a panel of B (sk_gemm_panels): a
 * multiple of every micro-kernel's width. */
#define SK_PANEL 32
/* sk_gemm_panels is sk_gemm (same bits) with B (K x N) stored in panels
 * of SK_PANEL columns, ldp floats apart: B(k, j) is
 * Bp[(j / SK_PANEL) * ldp + k * SK_PANEL + j % SK_PANEL], zero past N.
 * A call starts at a panel's first column and row k of it at
 * Bp + k * SK_PANEL. A block then reads its columns of B as one run of
 * memory (a row-major B gives it a short run per row of K). */
void sk_gemm_panels(int ta, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
		    const float *Bp, int64_t ldp, float *C, int64_t ldc, int acc);
/* sk_gemm_apanels is sk_gemm (same bits; no transpositions) with A (M x
 * K) stored transposed in panels as sk_gemm_panels reads a B of K x M:
 * A(i, k) is Ap[(r / SK_PANEL) * ldpa + k * SK_PANEL + r % SK_PANEL] with
 * r = r0 + i (a call may start at any row; Ap is at k = 0 of the call).
 * A constant weight matrix stored so serves both this product and the
 * transposed one, C^T = B^T A^T through sk_gemm_panels. */
void sk_gemm_apanels(int64_t M, int64_t N, int64_t K, const float *Ap, int64_t ldpa, int64_t r0,
		     const float *B, int64_t ldb, float *C, int64_t ldc, int acc);
/* sk_gemm_isa is the instruction set sk_gemm uses (the best the CPU has,
 * unless sk_gemm_set_isa chose another). */
int sk_gemm_isa(void);
/* sk_gemm_set_isa makes sk_gemm use isa (< 0: the best supported); SK_ERR
 * if the CPU lacks it. For tests and benchmarks: results are the same. */
int sk_gemm_set_isa(int isa);
int sk_gemm_isa_supported(int isa);
const char *sk_gemm_isa_name(int isa);
/* sk_dw_vector_width is the widest input row a float 3x3 depthwise
 * kernel (one output channel per channel, not fused) computes 16
 * channels a vector with the instruction set sk_gemm uses now; 0 where it
 * never does. */
int sk_dw_vector_width(void);
/* sk_gemm_nr is the column count of the micro-kernel sk_gemm uses now: a
 * tile narrower than it computes padding. */
int sk_gemm_nr(void);

/* ---- helpers shared by the kernel files -------------------------------- */

/* SK_STOPPED is whether the stream is preempted (0 without checks); a
 * block that must tidy up before it returns tests it. */
#if SK_CHECKS
#define SK_STOPPED(ctx) (__atomic_load_n((ctx)->flag, __ATOMIC_RELAXED) != 0)
#else
#define SK_STOPPED(ctx) ((void)(ctx), 0)
#endif

/* SK_POLL returns from the enclosing block when the stream is preempted. */
#define SK_POLL(ctx)                   \
	do {                           \
		if (SK_STOPPED(ctx))   \
			return;        \
	} while (0)

/* sk_store_out / sk_store_in: how the output / in[j] is stored. */
static inline int sk_store_out(const sk_kernel *k)
{
	return (int)(k->p[SKP_STORE] & 3);
}

static inline int sk_store_in(const sk_kernel *k, int j)
{
	return (int)((k->p[SKP_STORE] >> (2 + 2 * j)) & 3);
}

/* sk_elem is element i of an operand at base stored as code. */
static inline const void *sk_elem(const float *base, int code, int64_t i)
{
	return code ? (const void *)((const uint8_t *)base + i) : (const void *)(base + i);
}

/* sk_store_ok reports whether st (p[SKP_STORE]) stores only operands in
 * ops as bytes (bit 0: the output, bit 1 + j: in[j]), each as U8 or S8:
 * each kernel's prep refuses any other. */
static inline int sk_store_ok(int64_t st, unsigned ops)
{
	for (int i = 0; i < 1 + SK_MAX_IN; i++, st >>= 2)
		if ((st & 3) == 3 || ((st & 3) && !(ops >> i & 1)))
			return 0;
	return st == 0;
}

/* sk_store_shift converts n values stored as code at src to float32 less
 * z (exact for 8-bit integers; QUANT's mode 1 with scale 1, as (x - z) * 1
 * is x - z); sk_store_load is it with z = 0. sk_store_save writes n
 * float32 integer values to dst stored as code (each in the code's range:
 * the kernels clamp first); sk_store_requant is QUANT's mode 4,
 * clamp(rint(x * s) + z, lo, hi), stored as code. Each is one pass with
 * the bits of the passes it replaces. store.c. */
void sk_store_shift(const void *src, int code, int64_t n, float z, float *dst);
void sk_store_save(const float *src, int code, int64_t n, void *dst);
void sk_store_requant(const float *src, int64_t n, float s, float z, float lo, float hi,
		      int code, void *dst);

/* sk_requant is one value of QUANT's mode 4 (requantising an integer
 * sum): clamp(rint(x * s) + z, lo, hi). */
static inline float sk_requant(float x, float s, float z, float lo, float hi)
{
	float v = rintf(x * s) + z;
	return v < lo ? lo : (v > hi ? hi : v);
}

static inline void sk_store_load(const void *src, int code, int64_t n, float *dst)
{
	sk_store_shift(src, code, n, 0.0f, dst);
}

/* SK_MV builds a function for AVX2+FMA and for baseline x86-64 and picks one
 * at load time, so the binary runs on any x86-64 host. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SK_MV __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SK_MV
#endif

/* sk_im2col_tile writes the im2col columns of output positions [p0,
 * p0+pl) of one group (Cg input channels of x) into col ((Cg*KH*KW) x pl,
 * leading dimension ldc), padding with pad (conv.c). */
void sk_im2col_tile(const float *x, int64_t Cg, int64_t H, int64_t W, int64_t KH,
		    int64_t KW, int64_t SH, int64_t SW, int64_t PT, int64_t PL,
		    int64_t DH, int64_t DW, int64_t OW, int64_t p0, int64_t pl,
		    float *col, int64_t ldc, float pad);

/* sk_scratch returns the unit's scratch buffer, at least n floats. */
float *sk_scratch(sk_ctx *ctx, int64_t n);

/* sk_split divides total items into about want chunks of at least min
 * items; returns the chunk size. */
int64_t sk_split(int64_t total, int64_t want, int64_t min);

/* sk_split_work divides total items into chunks for 4 blocks a unit, but
 * no more than by (the kernel's work in units of a worthwhile block), at
 * least one: the chunk size. */
int64_t sk_split_work(int64_t total, int units, int64_t by);

/* sk_epilogue applies bias, residual and activation to a rows x cols tile
 * of y (leading dimension ldy). bias_row / bias_col may be NULL; res (ldr)
 * may be NULL. */
void sk_epilogue(float *y, int64_t rows, int64_t cols, int64_t ldy,
		 const float *bias_row, const float *bias_col,
		 const float *res, int64_t ldr, int act, float a, float b);

/* sk_act_apply applies activation act in place to n floats. */
void sk_act_apply(float *x, int64_t n, int act, float a, float b);

/* sk_act1 applies activation act to one value. */
float sk_act1(float x, int act, float a, float b);

#define SK_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SK_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SK_CDIV(a, b) (((a) + (b) - 1) / (b))

/* sk_work_checks is the checks a preemptible copy's block of an m x n
 * product over a reduction of kd asks for: k->checks, or more where the
 * work bound (check_flops, check_bytes) needs them; at most 4096. */
static inline int64_t sk_work_checks(const sk_kernel *k, int64_t m, int64_t n,
				     int64_t kd)
{
	int64_t c = k->checks;
	if (k->check_flops > 0)
		c = SK_MAX(c, SK_CDIV(2 * m * n * kd, k->check_flops));
	if (k->check_bytes > 0)
		c = SK_MAX(c, SK_CDIV(4 * (m * kd + kd * n), k->check_bytes));
	return SK_MIN(c, 4096);
}

/* sk_check_split sizes the sgemm calls of a preemptible copy's block
 * (sk_kernel.checks = checks > 1: about checks calls). First over the n1
 * rows: at most n1 / per1 calls, a multiple of 8 rows a call, *sub1 capped
 * accordingly; then, when that makes fewer than checks calls, each row
 * call over n2 in chunks of a multiple of a2 (*sub2). */
static inline void sk_check_split(int64_t checks, int64_t n1, int64_t per1,
				  int64_t *sub1, int64_t n2, int64_t a2,
				  int64_t *sub2)
{
	int64_t calls1 = SK_MIN(checks, SK_MAX(n1 / per1, 1));
	*sub1 = SK_MIN(*sub1, SK_MAX(SK_CDIV(SK_CDIV(n1, calls1), 8) * 8, 8));
	int64_t calls2 = SK_CDIV(checks, SK_CDIV(n1, *sub1));
	if (calls2 > 1)
		*sub2 = SK_MAX(SK_CDIV(SK_CDIV(n2, calls2), a2) * a2, a2);
}

/* ---------------------------------------------------------------------
 * Request ingest (ingest.c): the requests' payloads, as fragments still in
 * the dataplane's packet buffers, gathered and converted in one pass into
 * a batch's float32 input tensor (ARCHITECTURE.md §2, step 5). Not a
 * kernel: the caller's thread runs it, one call per batch.
 * ------------------------------------------------------------------- */

/* Payload formats (libml.InputFormat). */
enum sk_in_fmt {
	SK_IN_F32 = 0,    /* float32 little-endian, the tensor itself */
	SK_IN_U8_HWC = 1, /* u8 HWC image -> float32 CHW, x*scale[c] + bias[c] */
	SK_IN_COUNT = 2
};

/* sk_frag is one fragment: n bytes at p. p is an address, not a typed
 * pointer: the bytes may be Go memory, which the caller keeps alive and
 * unmoved for the duration of the call. */
typedef struct {
	uintptr_t p;
	int64_t n;
} sk_frag;

/* sk_ingest writes nreq requests into dst, elems floats each, back to
 * back. Request r is made of frags[ends[r-1]:ends[r]] (ends[-1] = 0), in
 * payload order; fragments may end anywhere, inside a float or a pixel.
 * SK_IN_F32 copies 4*elems bytes; SK_IN_U8_HWC converts elems - tail
 * bytes of an HWC image with channels channels into CHW planes, byte x of
 * channel c to (float)x * scale[c] + bias[c] (one rounding each, no fused
 * multiply-add), and copies the tail floats that follow the image in the
 * fragments (a stateful stream's flow state, float32 little-endian) after
 * the planes. Nothing is written unless every request's fragments add up
 * to its size. Returns 0, or -1 - r for the first request r whose size is
 * wrong, or SK_IN_EBAD for bad arguments. */
#define SK_IN_EBAD INT64_MIN
int64_t sk_ingest(float *dst, int32_t fmt, int64_t elems, int64_t channels,
		  int64_t tail, const float *scale, const float *bias,
		  const sk_frag *frags, const int64_t *ends, int64_t nreq);

#endif /* SLUICE_CPU_H */
