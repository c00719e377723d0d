/*
 * sg_emu.h: sg.h's primitives for the CPU emulator (compiled as C++ with
 * -DSG_EMU). The emulator (sg_emu.cc) runs a block's SG_THREADS threads as
 * coroutines on one OS thread: each runs until it reaches a barrier or a
 * warp shuffle, then the next; a barrier completes when every live thread
 * of the block waits on it, a shuffle when every live lane of the warp
 * does. Shared memory is static storage (blocks run one at a time);
 * atomics are plain read-modify-writes (no thread switch can intervene).
 * This checks a kernel's indexing, bounds, barrier use and results, not
 * its speed or its behaviour under real concurrency.
 */
#ifndef SG_EMU_H
#define SG_EMU_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#define SG_KERNEL extern "C"
#define SG_DEV static inline
#define SG_DEVM inline
#define SG_DEV_COLD static inline
#define SG_SHARED static

extern "C" {
sg_u32 sg_emu_tid(void);
sg_u32 sg_emu_bid(void);
sg_u32 sg_emu_nblocks(void);
sg_u32 sg_emu_smid(void);
sg_u32 sg_emu_nsm(void);
sg_u64 sg_emu_timer(void);
int sg_emu_sync_or(int p);
float sg_emu_shfl(float v, int arg, int xor_mode);
}

SG_DEV sg_u32 sg_tid(void) { return sg_emu_tid(); }
SG_DEV sg_u32 sg_bid(void) { return sg_emu_bid(); }
SG_DEV sg_u32 sg_nblocks(void) { return sg_emu_nblocks(); }
SG_DEV sg_u32 sg_smid(void) { return sg_emu_smid(); }
SG_DEV sg_u32 sg_nsmid(void) { return sg_emu_nsm(); }
SG_DEV sg_u64 sg_globaltimer(void) { return sg_emu_timer(); }
SG_DEV void sg_sync(void) { (void)sg_emu_sync_or(0); }
SG_DEV int sg_sync_or(int p) { return sg_emu_sync_or(p); }
SG_DEV float sg_shfl_xor(float v, int m) { return sg_emu_shfl(v, m, 1); }
SG_DEV float sg_shfl_idx(float v, int lane) { return sg_emu_shfl(v, lane, 0); }
SG_DEV sg_u32 sg_atomic_add32(sg_u32 *p, sg_u32 v)
{
	sg_u32 o = *p;
	*p = o + v;
	return o;
}
SG_DEV sg_u64 sg_atomic_add64(sg_u64 *p, sg_u64 v)
{
	sg_u64 o = *p;
	*p = o + v;
	return o;
}
SG_DEV sg_u32 sg_atomic_min32(sg_u32 *p, sg_u32 v)
{
	sg_u32 o = *p;
	if (v < o)
		*p = v;
	return o;
}
SG_DEV void sg_fence(void) {}
SG_DEV float sg_ex2(float x) { return exp2f(x); }
SG_DEV float sg_lg2(float x) { return log2f(x); }
SG_DEV float sg_sin_approx(float x) { return sinf(x); }
SG_DEV float sg_cos_approx(float x) { return cosf(x); }
/* Separately rounded product and sum (built without FP contraction:
 * C++17 is an ISO mode, and the baseline x86-64 target has no FMA). */
SG_DEV float sg_mul_rn(float a, float b) { return a * b; }
SG_DEV float sg_add_rn(float a, float b) { return a + b; }

/* Kernel registration: a thunk that unpacks the parameter buffer the way
 * the driver does (the PTX parameter layout: 0 st, 8 idx, 16 args, 448
 * the padding kernel's control block) and calls the kernel. */
typedef void (*sg_emu_thunk)(const unsigned char *params);
extern "C" void sg_emu_register(const char *name, sg_emu_thunk fn);

struct sg_state;
struct sg_args;
struct sg_emu_reg {
	sg_emu_reg(const char *name, sg_emu_thunk fn) { sg_emu_register(name, fn); }
};

template <class A, void (*F)(sg_state *, sg_i64, A)>
static void sg_emu_thunk3(const unsigned char *b)
{
	sg_state *st;
	sg_i64 idx;
	A a;
	memcpy(&st, b, 8);
	memcpy(&idx, b + 8, 8);
	memcpy((void *)&a, b + 16, sizeof(A));
	F(st, idx, a);
}

template <class A, class P, void (*F)(sg_state *, sg_i64, A, P *)>
static void sg_emu_thunk4(const unsigned char *b)
{
	sg_state *st;
	sg_i64 idx;
	A a;
	P *p;
	memcpy(&st, b, 8);
	memcpy(&idx, b + 8, 8);
	memcpy((void *)&a, b + 16, sizeof(A));
	memcpy(&p, b + 16 + sizeof(A), 8);
	F(st, idx, a, p);
}

#define SG_EMU_REGISTER(name) \
	static sg_emu_reg sg_emu_reg_##name(#name, sg_emu_thunk3<sg_args, name>);
#define SG_EMU_REGISTER4(name, P) \
	static sg_emu_reg sg_emu_reg_##name(#name, sg_emu_thunk4<sg_args, P, name>);

#endif /* SG_EMU_H */
