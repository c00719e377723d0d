/*
 * sg_emu.cc: a CPU emulator of the CUDA execution model for sluice's
 * kernels (see sg_emu.h). Blocks run one after another; the threads of a
 * block are coroutines scheduled round-robin between synchronization
 * points. On x86-64 a coroutine switch is a few instructions of our own
 * (sg_emu_switch below: the callee-saved registers, the stack pointer,
 * MXCSR and the x87 control word); glibc's swapcontext also saves and
 * restores the signal mask, a system call on every switch, which on a
 * paravirtualised VM made the emulator spend 90% of its time in the
 * kernel. Elsewhere it falls back to ucontext. Deadlocks (a barrier some
 * live thread never reaches, a shuffle with diverged lanes) are reported
 * as errors, not hangs.
 *
 * Test hooks: the SM count behind %smid (block b runs on SM b % nsm), and
 * a preemption trigger: when block `pre_block` of the launch has
 * completed `pre_syncs` barriers, the emulator sets a stream flag (by
 * default the launch's own, its first parameter), as the host would
 * mid-kernel.
 */
#include "sg_emu_api.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if !(defined(__x86_64__) && defined(__GNUC__))
#include <ucontext.h>
#endif

typedef unsigned int sg_u32;
typedef unsigned long long sg_u64;
typedef long long sg_i64;
typedef void (*sg_emu_thunk)(const unsigned char *params);

#define EMU_THREADS 256
#define EMU_STACK (128 * 1024)

#if defined(__x86_64__) && defined(__GNUC__)
#define EMU_OWN_SWITCH 1
/* sg_emu_switch saves the running coroutine's callee-saved state on its
 * stack, stores its stack pointer in *from, and resumes the one whose
 * stack pointer is to (System V x86-64: rdi = from, rsi = to). */
extern "C" void sg_emu_switch(void **from, void *to);
__asm__(".text\n"
	".globl sg_emu_switch\n"
	".hidden sg_emu_switch\n"
	".type sg_emu_switch, @function\n"
	"sg_emu_switch:\n"
	"\tpushq %rbp\n"
	"\tpushq %rbx\n"
	"\tpushq %r12\n"
	"\tpushq %r13\n"
	"\tpushq %r14\n"
	"\tpushq %r15\n"
	"\tsubq $8, %rsp\n"
	"\tstmxcsr (%rsp)\n"
	"\tfnstcw 4(%rsp)\n"
	"\tmovq %rsp, (%rdi)\n"
	"\tmovq %rsi, %rsp\n"
	"\tldmxcsr (%rsp)\n"
	"\tfldcw 4(%rsp)\n"
	"\taddq $8, %rsp\n"
	"\tpopq %r15\n"
	"\tpopq %r14\n"
	"\tpopq %r13\n"
	"\tpopq %r12\n"
	"\tpopq %rbx\n"
	"\tpopq %rbp\n"
	"\tret\n"
	".size sg_emu_switch, .-sg_emu_switch\n");
#else
#define EMU_OWN_SWITCH 0
#endif

namespace {

struct reg {
	const char *name;
	sg_emu_thunk fn;
	reg *next;
};
reg *registry;

enum { T_RUN, T_BAR, T_WARP, T_DONE };

struct thread {
#if EMU_OWN_SWITCH
	void *sp; /* saved stack pointer while switched out */
#else
	ucontext_t ctx;
#endif
	int state;
	int pred;   /* barrier predicate */
	float val;  /* shuffle value */
	int arg;    /* shuffle lane or xor mask */
	int xmode;  /* shuffle kind */
	int ires;   /* barrier result */
	float fres; /* shuffle result */
};

struct emu {
	thread th[EMU_THREADS];
	char *stacks;
#if EMU_OWN_SWITCH
	void *sched_sp;
#else
	ucontext_t sched;
#endif
	int cur;
	sg_u32 bid, nblocks, nsm;
	sg_emu_thunk fn;
	const unsigned char *params;
	char err[256];
};
emu E;

#if EMU_OWN_SWITCH
void yield(void) { sg_emu_switch(&E.th[E.cur].sp, E.sched_sp); }

/* thread_main is where a coroutine starts (sg_emu_switch returns into
 * it, with the stack aligned as after a call); it never returns: once
 * the kernel body is done it switches to the scheduler for good. */
void thread_main(void)
{
	E.fn(E.params);
	E.th[E.cur].state = T_DONE;
	sg_emu_switch(&E.th[E.cur].sp, E.sched_sp);
	__builtin_trap(); /* a finished coroutine is never resumed */
}

/* thread_start lays out coroutine i's stack as sg_emu_switch leaves a
 * switched-out one: MXCSR and the x87 control word (the scheduler's),
 * six callee-saved registers (zero), then thread_main as the return
 * address, above it a zero where thread_main's return address would be. */
void thread_start(int i)
{
	sg_u64 *top = (sg_u64 *)(E.stacks + (size_t)(i + 1) * EMU_STACK);
	top = (sg_u64 *)((uintptr_t)top & ~(uintptr_t)15);
	sg_u64 *sp = top;
	*--sp = 0;
	*--sp = (sg_u64)(uintptr_t)thread_main;
	for (int r = 0; r < 6; r++)
		*--sp = 0;
	unsigned int mxcsr;
	unsigned short fpucw;
	__asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
	__asm__ volatile("fnstcw %0" : "=m"(fpucw));
	*--sp = 0;
	memcpy(sp, &mxcsr, 4);
	memcpy((char *)sp + 4, &fpucw, 2);
	E.th[i].sp = sp;
}

void resume(int i) { sg_emu_switch(&E.sched_sp, E.th[i].sp); }
#else
void thread_main(void)
{
	E.fn(E.params);
	E.th[E.cur].state = T_DONE;
	/* uc_link returns to the scheduler */
}

void yield(void) { swapcontext(&E.th[E.cur].ctx, &E.sched); }

void thread_start(int i)
{
	thread *t = &E.th[i];
	getcontext(&t->ctx);
	t->ctx.uc_stack.ss_sp = E.stacks + (size_t)i * EMU_STACK;
	t->ctx.uc_stack.ss_size = EMU_STACK;
	t->ctx.uc_link = &E.sched;
	makecontext(&t->ctx, thread_main, 0);
}

void resume(int i) { swapcontext(&E.sched, &E.th[i].ctx); }
#endif

/* run_block runs every thread of block E.bid to completion. */
int run_block(sg_i64 pre_syncs, int *flag)
{
	for (int i = 0; i < EMU_THREADS; i++) {
		thread_start(i);
		E.th[i].state = T_RUN;
	}
	sg_i64 syncs = 0;
	for (;;) {
		for (int i = 0; i < EMU_THREADS; i++) {
			if (E.th[i].state != T_RUN)
				continue;
			E.cur = i;
			resume(i);
		}
		/* nobody runs: complete warp shuffles, then the barrier */
		int progress = 0, live = 0, atbar = 0;
		for (int w = 0; w < EMU_THREADS / 32; w++) {
			thread *l = &E.th[w * 32];
			int wl = 0, ws = 0;
			for (int j = 0; j < 32; j++) {
				if (l[j].state != T_DONE)
					wl++;
				if (l[j].state == T_WARP)
					ws++;
			}
			if (ws == 0)
				continue;
			if (ws != 32) {
				snprintf(E.err, sizeof E.err,
					 "block %u warp %d: shuffle with %d of %d live lanes "
					 "(32 needed)", E.bid, w, ws, wl);
				return -1;
			}
			for (int j = 0; j < 32; j++) {
				int src = l[j].xmode ? (j ^ l[j].arg) : l[j].arg;
				l[j].fres = l[src & 31].val;
			}
			for (int j = 0; j < 32; j++)
				l[j].state = T_RUN;
			progress = 1;
		}
		if (progress)
			continue;
		int any = 0;
		for (int i = 0; i < EMU_THREADS; i++) {
			if (E.th[i].state == T_DONE)
				continue;
			live++;
			if (E.th[i].state == T_BAR) {
				atbar++;
				any |= E.th[i].pred != 0;
			}
		}
		if (live == 0)
			return 0;
		if (atbar != live) {
			snprintf(E.err, sizeof E.err,
				 "block %u: deadlock (%d of %d live threads at a barrier)",
				 E.bid, atbar, live);
			return -1;
		}
		if (atbar != EMU_THREADS) {
			/* legal on sm_70+ only when whole warps exited; our kernels
			 * never exit before a barrier, so call it a bug */
			snprintf(E.err, sizeof E.err,
				 "block %u: barrier reached by %d threads, %d exited",
				 E.bid, atbar, EMU_THREADS - atbar);
			return -1;
		}
		syncs++;
		if (flag && syncs == pre_syncs)
			*(volatile int *)flag = 1;
		for (int i = 0; i < EMU_THREADS; i++) {
			E.th[i].ires = any;
			E.th[i].state = T_RUN;
		}
	}
}

} // namespace

extern "C" {

void sg_emu_register(const char *name, sg_emu_thunk fn)
{
	reg *r = (reg *)malloc(sizeof *r);
	r->name = name;
	r->fn = fn;
	r->next = registry;
	registry = r;
}

sg_u32 sg_emu_tid(void) { return (sg_u32)E.cur; }
sg_u32 sg_emu_bid(void) { return E.bid; }
sg_u32 sg_emu_nblocks(void) { return E.nblocks; }
sg_u32 sg_emu_smid(void) { return E.bid % E.nsm; }
sg_u32 sg_emu_nsm(void) { return E.nsm; }

sg_u64 sg_emu_timer(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (sg_u64)ts.tv_sec * 1000000000ull + (sg_u64)ts.tv_nsec;
}

int sg_emu_sync_or(int p)
{
	thread *t = &E.th[E.cur];
	t->pred = p;
	t->state = T_BAR;
	yield();
	return t->ires;
}

float sg_emu_shfl(float v, int arg, int xor_mode)
{
	thread *t = &E.th[E.cur];
	t->val = v;
	t->arg = arg;
	t->xmode = xor_mode;
	t->state = T_WARP;
	yield();
	return t->fres;
}

int sg_emu_kernels(char *buf, int len)
{
	int n = 0;
	buf[0] = 0;
	for (reg *r = registry; r; r = r->next) {
		int k = snprintf(buf + n, (size_t)(len - n), "%s%s", n ? " " : "", r->name);
		if (k < 0 || k >= len - n)
			return -1;
		n += k;
	}
	return n;
}

int sg_emu_launch(const char *name, unsigned grid, unsigned block,
		  const void *params, int nsm, int reverse, long long pre_block,
		  long long pre_syncs, unsigned long long pre_flag, char *err,
		  int errlen)
{
	reg *r = registry;
	while (r && strcmp(r->name, name) != 0)
		r = r->next;
	if (!r) {
		snprintf(err, (size_t)errlen, "no kernel %s", name);
		return -1;
	}
	if (block != EMU_THREADS) {
		snprintf(err, (size_t)errlen, "block size %u, kernels take %d", block,
			 EMU_THREADS);
		return -1;
	}
	if (!E.stacks) {
		E.stacks = (char *)malloc((size_t)EMU_THREADS * EMU_STACK);
		if (!E.stacks) {
			snprintf(err, (size_t)errlen, "out of memory");
			return -1;
		}
	}
	E.fn = r->fn;
	E.params = (const unsigned char *)params;
	E.nblocks = grid;
	E.nsm = nsm > 0 ? (sg_u32)nsm : 1;
	int *flag;
	memcpy(&flag, params, sizeof flag); /* parameter 0: the stream state */
	if (pre_flag)
		flag = (int *)(uintptr_t)pre_flag;
	for (sg_u32 i = 0; i < grid; i++) {
		sg_u32 b = reverse ? grid - 1 - i : i;
		E.bid = b;
		int *pf = NULL;
		if ((long long)b == pre_block) {
			if (pre_syncs <= 0)
				*(volatile int *)flag = 1;
			else
				pf = flag;
		}
		if (run_block(pre_syncs, pf) != 0) {
			snprintf(err, (size_t)errlen, "%s: %s", name, E.err);
			return -1;
		}
	}
	return 0;
}

} /* extern "C" */
