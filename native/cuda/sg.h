/*
 * sg.h: the one header of sluice's CUDA kernels ("sg" = sluice GPU). It
 * replaces the CUDA headers: the kernels are compiled by clang with
 * -nocudainc -nocudalib, so everything a kernel needs (attributes, special
 * registers, barriers, shuffles, atomics, math) is defined here on top of
 * clang's NVVM builtins.
 *
 * The same sources also compile as plain C++ with -DSG_EMU: then every
 * primitive below maps onto sg_emu.h, a small CPU emulator of the CUDA
 * execution model (blocks of cooperative threads, barriers, warp shuffles)
 * that the Go tests run the kernels on when no GPU is present.
 *
 * Execution model (ARCHITECTURE.md §3, REEF §4): a kernel is a grid of
 * blocks of SG_THREADS threads; each block writes a disjoint tile of its
 * output and is idempotent. Every kernel entry has the same three
 * parameters:
 *
 *   0  sg_state *st   the launching stream's state in device memory
 *                     (preemption flag, execution index, trace ring)
 *   1  long long idx  the kernel's execution index in its stream
 *   2  sg_args a      the operator's arguments, by value (432 bytes)
 *
 * and starts with the preemption prologue (sg_enter): thread 0 loads the
 * flag (the entry's first global memory access); if it is set the whole
 * block exits at once (lazy eviction), else thread 0 records idx in
 * st->exec. Long loops poll the flag (SG_POLL) so a running block dies
 * within microseconds. The padding kernel (pad.cu) adds a fourth
 * parameter. libml/cuda's tests check these conventions on the PTX.
 */
#ifndef SG_H
#define SG_H

/* Threads per block of every kernel: one size, so that the padding kernel
 * can run any operator's blocks. */
#define SG_THREADS 256
/* Elements per block of the elementwise kernels (4 per thread). */
#define SG_EPB 1024
/* Warps per block. */
#define SG_WARPS (SG_THREADS / 32)

typedef unsigned int sg_u32;
typedef unsigned long long sg_u64;
typedef long long sg_i64;
/* 16 bytes moved by one load or store instruction. */
typedef sg_u32 sg_u32x4 __attribute__((vector_size(16)));

#ifdef SG_EMU
#include "sg_emu.h"
#else
/* ---- device: clang -x cuda --cuda-device-only -nocudainc ------------- */

#define SG_KERNEL extern "C" __attribute__((global)) \
	__attribute__((launch_bounds(SG_THREADS)))
#define SG_DEV static __attribute__((device)) __attribute__((always_inline)) inline
/* member functions (no static) */
#define SG_DEVM __attribute__((device)) __attribute__((always_inline)) inline
/* a body called, not inlined, where the padding kernel dispatches: its
 * registers stay out of the other bodies' allocation */
#define SG_DEV_COLD static __attribute__((device)) __attribute__((noinline))
#define SG_SHARED __attribute__((shared))

SG_DEV sg_u32 sg_tid(void) { return __nvvm_read_ptx_sreg_tid_x(); }
SG_DEV sg_u32 sg_bid(void) { return __nvvm_read_ptx_sreg_ctaid_x(); }
SG_DEV sg_u32 sg_nblocks(void) { return __nvvm_read_ptx_sreg_nctaid_x(); }
SG_DEV sg_u32 sg_smid(void) { return __nvvm_read_ptx_sreg_smid(); }
SG_DEV sg_u32 sg_nsmid(void) { return __nvvm_read_ptx_sreg_nsmid(); }
/* %globaltimer: nanoseconds, updated about every microsecond. */
SG_DEV sg_u64 sg_globaltimer(void) { return __nvvm_read_ptx_sreg_globaltimer(); }

/* __syncthreads() */
SG_DEV void sg_sync(void) { __nvvm_barrier_sync(0); }
/* __syncthreads_or(p): a barrier that also returns, to every thread,
 * whether any thread passed p != 0 (bar.red.or). */
SG_DEV int sg_sync_or(int p) { return __nvvm_bar0_or(p); }

SG_DEV float sg_shfl_xor(float v, int m)
{
	return __nvvm_shfl_sync_bfly_f32(0xffffffffu, v, m, 0x1f);
}
SG_DEV float sg_shfl_idx(float v, int lane)
{
	return __nvvm_shfl_sync_idx_f32(0xffffffffu, v, lane, 0x1f);
}

SG_DEV sg_u32 sg_atomic_add32(sg_u32 *p, sg_u32 v)
{
	return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
SG_DEV sg_u64 sg_atomic_add64(sg_u64 *p, sg_u64 v)
{
	return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
SG_DEV sg_u32 sg_atomic_min32(sg_u32 *p, sg_u32 v)
{
	return __atomic_fetch_min(p, v, __ATOMIC_RELAXED);
}
/* A GPU-scope fence: earlier writes are visible before later ones. */
SG_DEV void sg_fence(void) { __nvvm_membar_gl(); }

/* Fast approximations (PTX .approx; relative error ~2^-22). */
SG_DEV float sg_ex2(float x) { return __nvvm_ex2_approx_f(x); }
SG_DEV float sg_lg2(float x) { return __nvvm_lg2_approx_f(x); }
SG_DEV float sg_sin_approx(float x) { return __nvvm_sin_approx_f(x); }
SG_DEV float sg_cos_approx(float x) { return __nvvm_cos_approx_f(x); }

/* Kernels register themselves with the emulator only. */
#define SG_EMU_REGISTER(name)
#define SG_EMU_REGISTER4(name, P)

/* A product and a sum, each rounded on its own (mul.rn, add.rn): never
 * contracted into one fused multiply-add, so that a conversion gives the
 * host's bits (native/cpu's ingest). */
SG_DEV float sg_mul_rn(float a, float b) { return __nvvm_mul_rn_f(a, b); }
SG_DEV float sg_add_rn(float a, float b) { return __nvvm_add_rn_f(a, b); }
#endif /* SG_EMU */

/* Exactly rounded operations that both compilers lower inline (cvt.rmi,
 * cvt.rni, sqrt.rn, abs, fma.rn on the GPU). */
#define sg_floor(x) __builtin_floorf(x)
#define sg_ceil(x) __builtin_ceilf(x)
#define sg_rint(x) __builtin_rintf(x)
#define sg_sqrt(x) __builtin_sqrtf(x)
#define sg_fabs(x) __builtin_fabsf(x)

/* A compiler-only fence: keeps the compiler from hoisting every shared
 * memory load of an unrolled loop to its top (which costs registers). */
#define SG_CFENCE() __asm__ __volatile__("" ::: "memory")

#define SG_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SG_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SG_CDIV(a, b) (((a) + (b) - 1) / (b))

/* ---- shared types (the Go side mirrors these: libml/cuda) ------------- */

#define SG_MAX_IN 8
#define SG_NP 32
#define SG_NF 8
#define SG_NT 8

/* Operator arguments, the CPU engine's sk_kernel layout (op numbering,
 * p/f slots: native/cpu/sluice_cpu.h) with t[] holding the GPU tiling
 * chosen by the launcher. 432 bytes, 8-byte aligned, passed by value. */
typedef struct sg_args {
	float *out;                 /*   0 */
	const float *in[SG_MAX_IN]; /*   8 */
	const sg_i64 *aux;          /*  72 */
	sg_i64 p[SG_NP];            /*  80 */
	float f[SG_NF];             /* 336 */
	sg_i64 t[SG_NT];            /* 368 */
} sg_args;

/* t[] slots every kernel shares. t[SG_T_BASE] is the first block: a
 * launch of g blocks runs blocks base..base+g-1 of the kernel's grid, so a
 * grid can be run in pieces (SPLIT) or finished after padding (REEF §5). */
#define SG_T_BASE 7

/* Shared p/f slots (sluice_cpu.h). */
#define SGP_ACT 31
#define SGF_ACT_A 6
#define SGF_ACT_B 7

/* A stream's state, in device memory, 64 bytes. */
typedef struct sg_state {
	volatile int flag;      /*  0 preemption flag, set by the host */
	int _pad0;              /*  4 */
	volatile sg_i64 exec;   /*  8 execution index of the last kernel whose
				 *    block started (REEF §4.4) */
	sg_u64 *ring;           /* 16 trace ring (Paella §4.1), device address
				 *    of pinned host memory; NULL = off */
	sg_u32 ring_mask;       /* 24 ring slots - 1 (a power of two) */
	sg_u32 _pad1;           /* 28 */
	sg_u64 ring_head;       /* 32 slots claimed so far */
	sg_u64 _pad2[3];        /* 40 */
} sg_state;

/* Trace ring words: one 64-bit store per event, never torn.
 *   63     valid (1)
 *   62     end (1 = block end, 0 = block start)
 *   61..54 SM id (8 bits)
 *   53..42 execution index (low 12 bits)
 *   41..22 block index (low 20 bits)
 *   21..0  %globaltimer >> 8 (256 ns units, low 22 bits: wraps after 1.07 s)
 */
#define SG_RING_VALID (1ull << 63)
#define SG_RING_END (1ull << 62)

SG_DEV void sg_ring_post(sg_state *st, int end, sg_i64 idx, sg_i64 blk)
{
	sg_u64 slot = sg_atomic_add64(&st->ring_head, 1);
	sg_u64 w = SG_RING_VALID | (end ? SG_RING_END : 0) |
		   ((sg_u64)(sg_smid() & 0xff) << 54) |
		   ((sg_u64)(idx & 0xfff) << 42) |
		   ((sg_u64)(blk & 0xfffff) << 22) |
		   ((sg_globaltimer() >> 8) & 0x3fffff);
	*(volatile sg_u64 *)&st->ring[slot & st->ring_mask] = w;
}

/* sg_enter is the preemption prologue. Returns nonzero, in every thread of
 * the block, when the block must exit. Thread 0's volatile load of
 * st->flag is the kernel's first global memory access. */
SG_DEV int sg_enter(sg_state *st, sg_i64 idx, sg_i64 blk)
{
	int stop = 0;
	if (sg_tid() == 0) {
		stop = st->flag;
		if (!stop) {
			st->exec = idx;
			if (st->ring)
				sg_ring_post(st, 0, idx, blk);
		}
	}
	return sg_sync_or(stop);
}

/* sg_leave posts the block-end event when tracing is on. Every thread
 * reaches it (bodies return, they never exit). */
SG_DEV void sg_leave(sg_state *st, sg_i64 idx, sg_i64 blk)
{
	if (st->ring) {
		sg_sync();
		if (sg_tid() == 0)
			sg_ring_post(st, 1, idx, blk);
	}
}

/* sg_flag0 is thread 0's view of the flag (0 in other threads): load it
 * early, consume it later with sg_sync_or, so the load's latency hides
 * behind the loop body. */
SG_DEV int sg_flag0(const sg_state *st) { return sg_tid() == 0 ? st->flag : 0; }

/* SG_POLL: in-loop preemption check of a block-uniform loop (every thread
 * must reach it): returns from the body when the stream is preempted. */
#define SG_POLL(st)                                      \
	do {                                             \
		if (sg_sync_or(sg_flag0(st)))           \
			return;                          \
	} while (0)

/* SG_ENTRY defines kernel `name` running `body(a, blk, st)` for block
 * blk = t[SG_T_BASE] + blockIdx.x after the prologue. */
#define SG_ENTRY(name, body)                                                 \
	SG_KERNEL void name(sg_state *st, sg_i64 idx, const sg_args a)     \
	{                                                                    \
		sg_i64 blk = a.t[SG_T_BASE] + (sg_i64)sg_bid();              \
		if (sg_enter(st, idx, blk))                                  \
			return;                                              \
		body(a, blk, st);                                            \
		sg_leave(st, idx, blk);                                      \
	}                                                                    \
	SG_EMU_REGISTER(name)

/* pad.cu includes the family files for their bodies only. */
#ifdef SG_NO_ENTRIES
#undef SG_ENTRY
#define SG_ENTRY(name, body)
#endif

/* sg_qclamp clamps a quantised value to its type's range (QUANT, QGEMM,
 * DWCONV on integers). */
SG_DEV float sg_qclamp(float v, float lo, float hi)
{
	return v < lo ? lo : (v > hi ? hi : v);
}

/* ---- math ----------------------------------------------------------- */

#define SG_LOG2E 1.44269504088896341f
#define SG_LN2 0.693147180559945309f

SG_DEV float sg_expf(float x)
{
	x = x < -87.3f ? -87.3f : x;
	x = x > 88.7f ? 88.7f : x;
	return sg_ex2(x * SG_LOG2E);
}

SG_DEV float sg_logf(float x) { return sg_lg2(x) * SG_LN2; }

/* sin/cos with a range reduction to [-pi, pi] first (the .approx
 * instructions lose accuracy outside it). */
SG_DEV float sg_reduce_2pi(float x)
{
	return x - 6.28318530717958648f * sg_rint(x * 0.159154943091895336f);
}
SG_DEV float sg_sinf(float x) { return sg_sin_approx(sg_reduce_2pi(x)); }
SG_DEV float sg_cosf(float x) { return sg_cos_approx(sg_reduce_2pi(x)); }

/* erf from Numerical Recipes' erfc Chebyshev fit (as native/cpu). */
SG_DEV float sg_erff(float x)
{
	float z = sg_fabs(x);
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
	float r = 1.0f - t * sg_expf(-z * z + p);
	return x < 0 ? -r : r;
}

SG_DEV float sg_tanhf(float x)
{
	float z = sg_fabs(x);
	float z2 = z * z;
	float small = z + z * z2 * (-0.333333333f + z2 * (0.133333333f +
			 z2 * (-0.0539682540f + z2 * (0.0218694885f +
			 z2 * -0.00886323552f))));
	float big = 1.0f - 2.0f / (sg_expf(2.0f * z) + 1.0f);
	float r = z < 0.4f ? small : big;
	return x < 0 ? -r : r;
}

SG_DEV float sg_sigmoidf(float x) { return 1.0f / (1.0f + sg_expf(-x)); }

/* atan: Cephes' atanf reduction to |t| <= tan(pi/8) and its polynomial;
 * atan(+-inf) = +-pi/2. */
SG_DEV float sg_atanf(float x)
{
	float z = sg_fabs(x), y0 = 0.0f;
	if (z > 2.414213562373095f) {
		y0 = 1.5707963267948966f;
		z = -1.0f / z;
	} else if (z > 0.4142135623730950f) {
		y0 = 0.7853981633974483f;
		z = (z - 1.0f) / (z + 1.0f);
	}
	float z2 = z * z;
	float r = y0 + ((((8.05374449538e-2f * z2 - 1.38776856032e-1f) * z2 + 1.99777106478e-1f) * z2 -
			 3.33329491539e-1f) * z2 * z + z);
	return x < 0 ? -r : r;
}

/* asin(x) = atan(x / sqrt((1 - x)(1 + x))), acos(x) =
 * 2 atan(sqrt((1 - x) / (1 + x))): no cancellation near +-1; NaN past. */
SG_DEV float sg_asinf(float x)
{
	return sg_atanf(x / sg_sqrt((1.0f - x) * (1.0f + x)));
}
SG_DEV float sg_acosf(float x) { return 2.0f * sg_atanf(sg_sqrt((1.0f - x) / (1.0f + x))); }

/* sinh, asinh, atanh: their series near 0 (where the exp/log forms
 * cancel), the exp/log forms beyond. */
SG_DEV float sg_sinhf(float x)
{
	float z = sg_fabs(x);
	if (z < 0.5f) {
		float z2 = x * x;
		return x + x * z2 * (1.0f / 6.0f + z2 * (1.0f / 120.0f + z2 * (1.0f / 5040.0f +
				  z2 * (1.0f / 362880.0f))));
	}
	float e = sg_expf(z);
	float r = 0.5f * (e - 1.0f / e);
	return x < 0 ? -r : r;
}
SG_DEV float sg_asinhf(float x)
{
	float z = sg_fabs(x);
	if (z < 0.125f) {
		float z2 = x * x;
		return x + x * z2 * (-1.0f / 6.0f + z2 * (3.0f / 40.0f + z2 * (-15.0f / 336.0f +
				  z2 * (105.0f / 3456.0f))));
	}
	float r = z > 1e4f ? sg_logf(z) + SG_LN2 : sg_logf(z + sg_sqrt(z * z + 1.0f));
	return x < 0 ? -r : r;
}
SG_DEV float sg_atanhf(float x)
{
	float z = sg_fabs(x);
	if (z < 0.125f) {
		float z2 = x * x;
		return x + x * z2 * (1.0f / 3.0f + z2 * (1.0f / 5.0f + z2 * (1.0f / 7.0f + z2 * (1.0f / 9.0f))));
	}
	float r = 0.5f * sg_logf((1.0f + z) / (1.0f - z));
	return x < 0 ? -r : r;
}

/* pow(x, y) for float32 with C's special cases for x <= 0. */
SG_DEV float sg_powf(float x, float y)
{
	if (y == 0.0f)
		return 1.0f;
	if (y == 1.0f)
		return x;
	if (y == 2.0f)
		return x * x;
	if (y == 0.5f)
		return sg_sqrt(x);
	float ax = sg_fabs(x);
	if (ax == 0.0f)
		return y > 0 ? 0.0f : __builtin_inff();
	float r = sg_ex2(y * sg_lg2(ax));
	if (x > 0)
		return r;
	if (sg_rint(y) != y)
		return __builtin_nanf(""); /* negative base, fractional power */
	/* odd integer power of a negative base is negative */
	return sg_fabs(sg_rint(y * 0.5f) - y * 0.5f) == 0.5f ? -r : r;
}

/* Activation codes: enum sk_act in native/cpu/sluice_cpu.h. */
enum {
	SG_ACT_NONE = 0, SG_ACT_RELU = 1, SG_ACT_CLIP = 2, SG_ACT_SIGMOID = 3,
	SG_ACT_HARDSIGMOID = 4, SG_ACT_HARDSWISH = 5, SG_ACT_TANH = 6,
	SG_ACT_GELU = 7, SG_ACT_GELU_TANH = 8, SG_ACT_LEAKYRELU = 9,
	SG_ACT_EXP = 10, SG_ACT_LOG = 11, SG_ACT_NEG = 12, SG_ACT_ABS = 13,
	SG_ACT_SQRT = 14, SG_ACT_RECIP = 15, SG_ACT_ERF = 16,
	SG_ACT_FLOOR = 17, SG_ACT_CEIL = 18, SG_ACT_POWC = 19,
	SG_ACT_AFFINE = 20, SG_ACT_SOFTPLUS = 21, SG_ACT_ELU = 22,
	SG_ACT_IDENTITY = 23, SG_ACT_ROUND = 24, SG_ACT_SIN = 25,
	SG_ACT_COS = 26, SG_ACT_F16 = 27, SG_ACT_SINH = 28, SG_ACT_ASINH = 29,
	SG_ACT_ATANH = 30, SG_ACT_ASIN = 31, SG_ACT_ACOS = 32, SG_ACT_ATAN = 33,
	SG_ACT_SIGN = 34, SG_ACT_THRESHRELU = 35, SG_ACT_SHRINK = 36,
	SG_ACT_COUNT = 37
};

/* sg_round_f16 rounds x to the nearest float16 value (ties to even), as
 * native/cpu/act.c's sk_round_f16 does, bit for bit. */
SG_DEV float sg_round_f16(float x)
{
	union {
		float f;
		sg_u32 u;
	} v;
	v.f = x;
	sg_u32 a = v.u & 0x7fffffffu;
	if (a >= 0x7f800000u)
		return x;
	if (a >= 0x477ff000u)
		return (v.u >> 31) ? -__builtin_inff() : __builtin_inff();
	if (a < 0x38800000u)
		return sg_rint(x * 16777216.0f) * 5.9604644775390625e-8f;
	v.u += 0xfffu + ((v.u >> 13) & 1u);
	v.u &= ~0x1fffu;
	return v.f;
}

/* sg_fmodf is C's fmodf, exact as the C library's (a remainder is always
 * representable): long division of the significands, one bit per step of
 * exponent difference. Device code has no libm. */
SG_DEV float sg_fmodf(float x, float y)
{
	union {
		float f;
		sg_u32 u;
	} vx, vy;
	vx.f = x;
	vy.f = y;
	sg_u32 ax = vx.u & 0x7fffffffu, ay = vy.u & 0x7fffffffu;
	if (ay == 0 || ay > 0x7f800000u || ax >= 0x7f800000u)
		return __builtin_nanf("");
	if (ax < ay)
		return x;
	/* |v| = m * 2^(e - 150), m normalised to [2^23, 2^24) */
	int ex = (int)(ax >> 23), ey = (int)(ay >> 23);
	sg_u32 mx = ax & 0x7fffffu, my = ay & 0x7fffffu;
	if (ex)
		mx |= 0x800000u;
	else
		ex = 1;
	if (ey)
		my |= 0x800000u;
	else
		ey = 1;
	for (; mx < 0x800000u; ex--)
		mx <<= 1;
	for (; my < 0x800000u; ey--)
		my <<= 1;
	for (; ex > ey; ex--) {
		if (mx >= my)
			mx -= my;
		mx <<= 1;
	}
	if (mx >= my)
		mx -= my;
	vx.u &= 0x80000000u; /* the dividend's sign */
	if (mx == 0)
		return vx.f;
	for (; mx < 0x800000u; ey--)
		mx <<= 1;
	if (ey >= 1)
		vx.u |= ((sg_u32)ey << 23) | (mx & 0x7fffffu);
	else
		vx.u |= mx >> (1 - ey); /* subnormal: the bits shifted out are 0 */
	return vx.f;
}

/* sg_act applies activation act (parameters a, b) to x; the same
 * definitions as native/cpu/act.c. */
SG_DEV float sg_act(float x, int act, float a, float b)
{
	switch (act) {
	case SG_ACT_RELU:
		return x > 0 ? x : 0;
	case SG_ACT_CLIP:
		return x < a ? a : (x > b ? b : x);
	case SG_ACT_SIGMOID:
		return sg_sigmoidf(x);
	case SG_ACT_HARDSIGMOID: {
		float y = a * x + b;
		return y < 0 ? 0 : (y > 1 ? 1 : y);
	}
	case SG_ACT_HARDSWISH: {
		float y = x * (1.0f / 6.0f) + 0.5f;
		return x * (y < 0 ? 0 : (y > 1 ? 1 : y));
	}
	case SG_ACT_TANH:
		return sg_tanhf(x);
	case SG_ACT_GELU:
		return 0.5f * x * (1.0f + sg_erff(x * 0.70710678118654752f));
	case SG_ACT_GELU_TANH:
		return 0.5f * x * (1.0f + sg_tanhf(0.79788456080286536f *
						   (x + 0.044715f * x * x * x)));
	case SG_ACT_LEAKYRELU:
		return x >= 0 ? x : a * x;
	case SG_ACT_EXP:
		return sg_expf(x);
	case SG_ACT_LOG:
		return sg_logf(x);
	case SG_ACT_NEG:
		return -x;
	case SG_ACT_ABS:
		return sg_fabs(x);
	case SG_ACT_SQRT:
		return sg_sqrt(x);
	case SG_ACT_RECIP:
		return 1.0f / x;
	case SG_ACT_ERF:
		return sg_erff(x);
	case SG_ACT_FLOOR:
		return sg_floor(x);
	case SG_ACT_CEIL:
		return sg_ceil(x);
	case SG_ACT_POWC:
		return sg_powf(x, a);
	case SG_ACT_AFFINE:
		return a * x + b;
	case SG_ACT_SOFTPLUS:
		return x > 20.0f ? x : sg_logf(1.0f + sg_expf(x));
	case SG_ACT_ELU:
		return x >= 0 ? x : a * (sg_expf(x) - 1.0f);
	case SG_ACT_ROUND:
		return sg_rint(x);
	case SG_ACT_SIN:
		return sg_sinf(x);
	case SG_ACT_COS:
		return sg_cosf(x);
	case SG_ACT_F16:
		return sg_round_f16(x);
	case SG_ACT_SINH:
		return sg_sinhf(x);
	case SG_ACT_ASINH:
		return sg_asinhf(x);
	case SG_ACT_ATANH:
		return sg_atanhf(x);
	case SG_ACT_ASIN:
		return sg_asinf(x);
	case SG_ACT_ACOS:
		return sg_acosf(x);
	case SG_ACT_ATAN:
		return sg_atanf(x);
	case SG_ACT_SIGN:
		return x > 0 ? 1.0f : (x < 0 ? -1.0f : x);
	case SG_ACT_THRESHRELU:
		return x > a ? x : 0.0f;
	case SG_ACT_SHRINK:
		return x < -a ? x + b : (x > a ? x - b : 0.0f);
	default: /* NONE, IDENTITY */
		return x;
	}
}

/* sg_act_fast inlines the activations common in epilogues and calls the
 * out-of-line sg_act_call for the rest, so an unrolled loop does not inline
 * a copy of every activation per element. */
__attribute__((noinline))
#ifndef SG_EMU
__attribute__((device))
#endif
__attribute__((unused)) static float sg_act_call(float x, int act, float a, float b)
{
	return sg_act(x, act, a, b);
}

SG_DEV float sg_act_fast(float x, int act, float a, float b)
{
	if (act == SG_ACT_NONE)
		return x;
	if (act == SG_ACT_RELU)
		return x > 0 ? x : 0;
	if (act == SG_ACT_CLIP)
		return x < a ? a : (x > b ? b : x);
	return sg_act_call(x, act, a, b);
}

/* ---- block reductions (all SG_THREADS threads must call) -------------- */

SG_DEV float sg_warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += sg_shfl_xor(v, o);
	return v;
}

SG_DEV float sg_warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1) {
		float w = sg_shfl_xor(v, o);
		v = w > v ? w : v;
	}
	return v;
}

/* sg_block_sum / sg_block_max return the block-wide result to every
 * thread; sh is SG_WARPS floats of shared memory. */
SG_DEV float sg_block_sum(float v, float *sh)
{
	v = sg_warp_sum(v);
	sg_u32 t = sg_tid();
	sg_sync(); /* sh may still be read by a previous reduction */
	if ((t & 31) == 0)
		sh[t >> 5] = v;
	sg_sync();
	v = (t & 31) < SG_WARPS ? sh[t & 31] : 0.0f;
	return sg_warp_sum(v);
}

SG_DEV float sg_block_max(float v, float *sh)
{
	v = sg_warp_max(v);
	sg_u32 t = sg_tid();
	sg_sync();
	if ((t & 31) == 0)
		sh[t >> 5] = v;
	sg_sync();
	v = (t & 31) < SG_WARPS ? sh[t & 31] : sh[0];
	return sg_warp_max(v);
}

#endif /* SG_H */
