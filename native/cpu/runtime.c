/*
 * runtime.c: the worker pool ("units"), streams and kernel launch.
 *
 * A stream's queue is a ring of launch slots. The stream's ticket packs the
 * sequence number of the kernel now running (high 32 bits) and the next
 * unclaimed block of it (low 32 bits); a unit claims a block with one CAS on
 * the ticket. The unit that completes a kernel's last block advances the
 * ticket to the next kernel, so no coordinator thread is needed and kernels
 * of one stream run strictly in order.
 *
 * Preemption (REEF §4): sk_stream_preempt sets the stream's flag. Blocks that
 * start afterwards exit in their prologue, running blocks exit at their next
 * SK_POLL, the unit that sees the flag claims the rest of the kernel in one
 * CAS, and the unit that completes it drops every queued kernel (O(1) queue
 * reset). The stream's execution index tells where to restore from.
 */
#define _GNU_SOURCE
#include "sluice_cpu.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <stdio.h>
#include <unistd.h>

#define SK_MAX_STREAMS 256
#define SK_SPIN_NS 60000 /* how long an idle unit spins before sleeping */

typedef struct sk_slot {
	sk_kernel *k;
	int64_t idx;
	uint64_t mask;
	int64_t grid;
	int64_t done;
} sk_slot;

struct sk_stream {
	_Alignas(64) uint64_t ticket;
	_Alignas(64) int32_t flag;
	int32_t profile;
	_Alignas(64) int64_t exec_idx;
	_Alignas(64) uint32_t tail;
	uint32_t completed;
	uint32_t done_gen;
	int32_t waiting;
	int64_t pre_idx;
	int64_t pre_blk;
	uint32_t cap;
	uint32_t capmask;
	sk_slot *ring;
	sk_pool *pool;
	int32_t in_use;
};

typedef struct sk_unit {
	sk_pool *pool;
	int id;
	int cpu;
	pthread_t thread;
	sk_ctx ctx;
} sk_unit;

struct sk_pool {
	_Alignas(64) uint32_t work_gen;
	_Alignas(64) int32_t sleepers;
	int32_t stop;
	int units;
	int pin;
	uint64_t all_mask;
	int32_t nstreams; /* high-water mark of used stream slots */
	pthread_mutex_t mu;
	sk_stream *streams[SK_MAX_STREAMS];
	sk_unit unit[SK_MAX_UNITS];
};

#define LD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define LDR(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define STR(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

static long futex(uint32_t *addr, int op, uint32_t val)
{
	return syscall(SYS_futex, addr, op, val, NULL, NULL, 0);
}

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

int sk_checks(void) { return SK_CHECKS; }

/* ---- kernel table ------------------------------------------------------ */

static const struct {
	sk_prep_fn prep;
	sk_block_fn block;
} sk_table[SK_OP_COUNT] = {
	[SK_OP_NOP] = {NULL, NULL},
	[SK_OP_GEMM] = {sk_prep_gemm, sk_block_gemm},
	[SK_OP_CONV] = {sk_prep_conv, sk_block_conv},
	[SK_OP_IM2COL] = {sk_prep_im2col, sk_block_im2col},
	[SK_OP_DWCONV] = {sk_prep_dwconv, sk_block_dwconv},
	[SK_OP_COL2IM] = {sk_prep_col2im, sk_block_col2im},
	[SK_OP_POOL] = {sk_prep_pool, sk_block_pool},
	[SK_OP_GPOOL] = {sk_prep_gpool, sk_block_gpool},
	[SK_OP_UNARY] = {sk_prep_unary, sk_block_unary},
	[SK_OP_BINARY] = {sk_prep_binary, sk_block_binary},
	[SK_OP_CHAFFINE] = {sk_prep_chaffine, sk_block_chaffine},
	[SK_OP_SOFTMAX] = {sk_prep_softmax, sk_block_softmax},
	[SK_OP_LAYERNORM] = {sk_prep_layernorm, sk_block_layernorm},
	[SK_OP_REDUCE] = {sk_prep_reduce, sk_block_reduce},
	[SK_OP_COPY] = {sk_prep_copy, sk_block_copy},
	[SK_OP_RESIZE] = {sk_prep_resize, sk_block_resize},
	[SK_OP_GATHER] = {sk_prep_gather, sk_block_gather},
};

int sk_kernel_prepare(sk_kernel *k, int units)
{
	if (k->op < 0 || k->op >= SK_OP_COUNT)
		return SK_ERR;
	if (units < 1)
		units = 1;
	k->grid = 1;
	k->scratch = 0;
	memset(k->t, 0, sizeof(k->t));
	if (k->op == SK_OP_NOP)
		return SK_OK;
	sk_table[k->op].prep(k, units);
	if (k->grid < 1 || k->grid > INT32_MAX)
		return SK_ERR;
	return SK_OK;
}

void sk_kernel_run_block(const sk_kernel *k, int64_t blk, sk_ctx *ctx)
{
	if (k->op > SK_OP_NOP && k->op < SK_OP_COUNT)
		sk_table[k->op].block(k, blk, ctx);
}

float *sk_scratch(sk_ctx *ctx, int64_t n)
{
	if (n <= ctx->scratch_cap)
		return ctx->scratch;
	free(ctx->scratch);
	int64_t cap = n + (n >> 3) + 64;
	ctx->scratch = aligned_alloc(64, (size_t)(((cap * 4) + 63) & ~63LL));
	ctx->scratch_cap = ctx->scratch ? cap : 0;
	return ctx->scratch;
}

int64_t sk_split(int64_t total, int64_t want, int64_t min)
{
	if (total <= 0)
		return 1;
	if (min < 1)
		min = 1;
	if (want < 1)
		want = 1;
	int64_t chunk = SK_CDIV(total, want);
	if (chunk < min)
		chunk = min;
	if (chunk > total)
		chunk = total;
	return chunk;
}

/* ---- streams ------------------------------------------------------------ */

static void stream_finish(sk_stream *s, uint32_t seq, sk_slot *sl, int64_t n)
{
	int64_t d = __atomic_add_fetch(&sl->done, n, __ATOMIC_ACQ_REL);
	if (d < sl->grid)
		return;
	sk_kernel *k = sl->k;
	if (LDR(&s->profile) && k->stat_t0) {
		__atomic_add_fetch(&k->stat_wall_ns, now_ns() - k->stat_t0,
				   __ATOMIC_RELAXED);
		__atomic_add_fetch(&k->stat_runs, 1, __ATOMIC_RELAXED);
		k->stat_t0 = 0;
	}
	uint32_t next = seq + 1;
	if (__atomic_load_n(&s->flag, __ATOMIC_SEQ_CST))
		next = LD(&s->tail); /* reset the queue: evict every queued kernel */
	ST(&s->completed, next);
	ST(&s->ticket, (uint64_t)next << 32);
	/* waiting: 1 = a waiter wants the queue drained, 2 = any completion */
	__atomic_add_fetch(&s->done_gen, 1, __ATOMIC_SEQ_CST);
	int32_t w = __atomic_load_n(&s->waiting, __ATOMIC_SEQ_CST);
	if (w == 2 || (w == 1 && next == LD(&s->tail)))
		futex(&s->done_gen, FUTEX_WAKE_PRIVATE, INT_MAX);
}

/* try_block claims and runs one block of s's current kernel on unit u.
 * Returns 1 when it made progress (or lost a race), 0 when s has nothing for
 * this unit now. */
static int try_block(sk_stream *s, sk_unit *u)
{
	uint64_t t = LD(&s->ticket);
	uint32_t seq = (uint32_t)(t >> 32);
	uint32_t blk = (uint32_t)t;
	uint32_t tail = LD(&s->tail);
	if ((int32_t)(tail - seq) <= 0)
		return 0;
	sk_slot *sl = &s->ring[seq & s->capmask];
	uint64_t mask = LDR(&sl->mask);
	int64_t grid = LDR(&sl->grid);
	if (!((mask >> u->id) & 1) || (int64_t)blk >= grid)
		return 0;
	if (__atomic_load_n(&s->flag, __ATOMIC_RELAXED)) {
		/* lazy eviction, batched: claim the rest of the kernel at once */
		uint64_t nt = ((uint64_t)seq << 32) | (uint32_t)grid;
		if (__atomic_compare_exchange_n(&s->ticket, &t, nt, 0,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			stream_finish(s, seq, sl, grid - (int64_t)blk);
		return 1;
	}
	if (!__atomic_compare_exchange_n(&s->ticket, &t, t + 1, 0,
					 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return 1;
	sk_kernel *k = LDR(&sl->k);
	int64_t idx = LDR(&sl->idx);
	if (idx == LDR(&s->pre_idx) && (int64_t)blk == LDR(&s->pre_blk)) {
		STR(&s->pre_idx, -1);
		__atomic_store_n(&s->flag, 1, __ATOMIC_SEQ_CST);
	}
	int prof = LDR(&s->profile);
	int64_t t0 = 0;
	if (prof) {
		t0 = now_ns();
		if (blk == 0)
			k->stat_t0 = t0;
	}
	u->ctx.flag = &s->flag;
#if SK_CHECKS
	/* preemption prologue: exit if evicted, else record the index */
	if (!__atomic_load_n(&s->flag, __ATOMIC_RELAXED)) {
		if (LDR(&s->exec_idx) != idx)
			STR(&s->exec_idx, idx);
		sk_table[k->op].block(k, blk, &u->ctx);
	}
#else
	if (LDR(&s->exec_idx) != idx)
		STR(&s->exec_idx, idx);
	sk_table[k->op].block(k, blk, &u->ctx);
#endif
	if (prof) {
		__atomic_add_fetch(&k->stat_block_ns, now_ns() - t0,
				   __ATOMIC_RELAXED);
		__atomic_add_fetch(&k->stat_blocks, 1, __ATOMIC_RELAXED);
	}
	stream_finish(s, seq, sl, 1);
	return 1;
}

static int scan(sk_pool *p, sk_unit *u, int start)
{
	int did = 0;
	int n = LD(&p->nstreams);
	for (int j = 0; j < n; j++) {
		sk_stream *s = LD(&p->streams[(start + j) % n]);
		if (!s)
			continue;
		while (try_block(s, u))
			did = 1;
	}
	return did;
}

static void *unit_main(void *arg)
{
	sk_unit *u = arg;
	sk_pool *p = u->pool;
	if (p->pin && u->cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(u->cpu, &set);
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
	char name[16];
	snprintf(name, sizeof(name), "sk-unit-%d", u->id);
	pthread_setname_np(pthread_self(), name);
	int start = 0;
	while (!LD(&p->stop)) {
		if (scan(p, u, start++)) 
			continue;
		int64_t t0 = now_ns();
		int found = 0;
		while (now_ns() - t0 < SK_SPIN_NS && !LD(&p->stop)) {
			for (int i = 0; i < 64; i++)
				cpu_relax();
			if (scan(p, u, start)) {
				found = 1;
				break;
			}
		}
		if (found)
			continue;
		uint32_t g = __atomic_load_n(&p->work_gen, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
		if (!scan(p, u, start) && !LD(&p->stop))
			futex(&p->work_gen, FUTEX_WAIT_PRIVATE, g);
		__atomic_sub_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
	}
	free(u->ctx.scratch);
	u->ctx.scratch = NULL;
	return NULL;
}

static void pool_kick(sk_pool *p)
{
	__atomic_add_fetch(&p->work_gen, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST))
		futex(&p->work_gen, FUTEX_WAKE_PRIVATE, INT_MAX);
}

void sk_blas_init(void);

sk_pool *sk_pool_create(int units, int pin)
{
	if (units < 1 || units > SK_MAX_UNITS)
		return NULL;
	sk_blas_init();
	sk_pool *p = aligned_alloc(64, (sizeof(sk_pool) + 63) & ~(size_t)63);
	if (!p)
		return NULL;
	memset(p, 0, sizeof(*p));
	p->units = units;
	p->pin = pin;
	p->all_mask = units == 64 ? ~0ULL : ((1ULL << units) - 1);
	pthread_mutex_init(&p->mu, NULL);
	int cpus[SK_MAX_UNITS * 4];
	int ncpu = 0;
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) == 0) {
		for (int c = 0; c < CPU_SETSIZE && ncpu < (int)(sizeof(cpus) / sizeof(cpus[0])); c++)
			if (CPU_ISSET(c, &set))
				cpus[ncpu++] = c;
	}
	for (int i = 0; i < units; i++) {
		sk_unit *u = &p->unit[i];
		u->pool = p;
		u->id = i;
		u->cpu = ncpu ? cpus[i % ncpu] : -1;
		u->ctx.unit = i;
		if (pthread_create(&u->thread, NULL, unit_main, u) != 0) {
			ST(&p->stop, 1);
			pool_kick(p);
			for (int j = 0; j < i; j++)
				pthread_join(p->unit[j].thread, NULL);
			free(p);
			return NULL;
		}
	}
	return p;
}

void sk_pool_destroy(sk_pool *p)
{
	if (!p)
		return;
	ST(&p->stop, 1);
	pool_kick(p);
	for (int i = 0; i < p->units; i++)
		pthread_join(p->unit[i].thread, NULL);
	for (int i = 0; i < SK_MAX_STREAMS; i++) {
		if (p->streams[i]) {
			free(p->streams[i]->ring);
			free(p->streams[i]);
		}
	}
	pthread_mutex_destroy(&p->mu);
	free(p);
}

int sk_pool_units(const sk_pool *p) { return p->units; }

sk_stream *sk_stream_create(sk_pool *p, int cap)
{
	if (cap < 4)
		cap = 4;
	uint32_t c = 1;
	while ((int)c < cap && c < (1u << 24))
		c <<= 1;
	pthread_mutex_lock(&p->mu);
	sk_stream *s = NULL;
	int slot = -1;
	for (int i = 0; i < SK_MAX_STREAMS; i++) {
		sk_stream *o = p->streams[i];
		if (o && !o->in_use && o->cap >= c) {
			s = o;
			slot = i;
			break;
		}
		if (!o && slot < 0)
			slot = i;
	}
	if (!s) {
		if (slot < 0) {
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		/* reuse a free slot with a too-small ring only if the slot is empty */
		if (p->streams[slot]) {
			for (slot = 0; slot < SK_MAX_STREAMS && p->streams[slot]; slot++)
				;
			if (slot == SK_MAX_STREAMS) {
				pthread_mutex_unlock(&p->mu);
				return NULL;
			}
		}
		s = aligned_alloc(64, (sizeof(sk_stream) + 63) & ~(size_t)63);
		if (!s) {
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		memset(s, 0, sizeof(*s));
		s->ring = calloc(c, sizeof(sk_slot));
		if (!s->ring) {
			free(s);
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		s->cap = c;
		s->capmask = c - 1;
		s->pool = p;
	}
	/* an idle stream object is never freed while the pool lives, so units
	 * scanning it stay safe; reset it to sequence 0 */
	s->flag = 0;
	s->profile = 0;
	s->exec_idx = -1;
	s->pre_idx = -1;
	s->pre_blk = -1;
	s->waiting = 0;
	ST(&s->completed, LD(&s->tail));
	ST(&s->ticket, (uint64_t)LD(&s->tail) << 32);
	s->in_use = 1;
	if (!p->streams[slot]) {
		ST(&p->streams[slot], s);
		if (slot + 1 > p->nstreams)
			ST(&p->nstreams, slot + 1);
	}
	pthread_mutex_unlock(&p->mu);
	return s;
}

void sk_stream_destroy(sk_stream *s)
{
	if (!s)
		return;
	sk_stream_preempt(s);
	sk_stream_sync(s);
	sk_pool *p = s->pool;
	pthread_mutex_lock(&p->mu);
	s->in_use = 0;
	pthread_mutex_unlock(&p->mu);
}

static int launch(sk_stream *s, sk_kernel *k, int64_t idx, uint64_t mask)
{
	uint32_t t = LDR(&s->tail);
	uint32_t c = LD(&s->completed);
	if (t - c >= s->cap)
		return SK_ERR;
	if (k->grid < 1)
		return SK_ERR;
	mask &= s->pool->all_mask;
	if (!mask)
		mask = s->pool->all_mask;
	sk_slot *sl = &s->ring[t & s->capmask];
	STR(&sl->k, k);
	STR(&sl->idx, idx);
	STR(&sl->mask, mask);
	STR(&sl->grid, k->grid);
	STR(&sl->done, 0);
	__atomic_store_n(&s->tail, t + 1, __ATOMIC_SEQ_CST);
	return SK_OK;
}

int sk_launch(sk_stream *s, sk_kernel *k, int64_t idx, uint64_t mask)
{
	int r = launch(s, k, idx, mask);
	if (r == SK_OK)
		pool_kick(s->pool);
	return r;
}

/* wait_until waits until completed has reached target (wrap-safe) or the
 * queue is drained. */
static void wait_until(sk_stream *s, uint32_t target, int32_t mode)
{
	for (;;) {
		uint32_t g = __atomic_load_n(&s->done_gen, __ATOMIC_SEQ_CST);
		uint32_t c = LD(&s->completed);
		uint32_t t = LD(&s->tail);
		if ((int32_t)(c - target) >= 0 || c == t)
			break;
		__atomic_store_n(&s->waiting, mode, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&s->done_gen, __ATOMIC_SEQ_CST) != g)
			continue;
		c = LD(&s->completed);
		if ((int32_t)(c - target) >= 0 || c == LD(&s->tail))
			break;
		futex(&s->done_gen, FUTEX_WAIT_PRIVATE, g);
	}
	__atomic_store_n(&s->waiting, 0, __ATOMIC_SEQ_CST);
}

int sk_stream_sync(sk_stream *s)
{
	wait_until(s, LD(&s->tail), 1);
	return __atomic_load_n(&s->flag, __ATOMIC_SEQ_CST) ? SK_PREEMPTED : SK_OK;
}

int sk_run(sk_stream *s, sk_kernel *ks, int n, int start, uint64_t mask)
{
	if (start < 0)
		start = 0;
	for (int i = start; i < n; i++) {
		if (__atomic_load_n(&s->flag, __ATOMIC_RELAXED))
			break;
		if (ks[i].op == SK_OP_NOP)
			continue;
		int kicked = 0;
		while (launch(s, &ks[i], i, mask) != SK_OK) {
			if (ks[i].grid < 1) {
				pool_kick(s->pool);
				sk_stream_sync(s);
				return SK_ERR;
			}
			/* queue full: wait for the oldest kernel, then retry */
			pool_kick(s->pool);
			kicked = 1;
			wait_until(s, LD(&s->completed) + 1, 2);
		}
		/* start the units on the first kernel at once */
		if (i == start || kicked)
			pool_kick(s->pool);
	}
	pool_kick(s->pool);
	return sk_stream_sync(s);
}

void sk_stream_preempt(sk_stream *s)
{
	__atomic_store_n(&s->flag, 1, __ATOMIC_SEQ_CST);
}

void sk_stream_restore(sk_stream *s)
{
	__atomic_store_n(&s->flag, 0, __ATOMIC_SEQ_CST);
}

int32_t *sk_stream_flag(sk_stream *s) { return &s->flag; }

int64_t sk_stream_exec_index(const sk_stream *s) { return LD(&s->exec_idx); }

void sk_stream_reset_index(sk_stream *s) { ST(&s->exec_idx, -1); }

void sk_stream_profile(sk_stream *s, int on) { ST(&s->profile, on ? 1 : 0); }

void sk_stream_preempt_at(sk_stream *s, int64_t idx, int64_t blk)
{
	ST(&s->pre_blk, blk);
	ST(&s->pre_idx, idx);
}

/* ---- memory --------------------------------------------------------------- */

#define SK_MMAP_MIN (256 * 1024)

void *sk_alloc(size_t bytes)
{
	if (bytes == 0)
		bytes = 64;
	if (bytes >= SK_MMAP_MIN) {
		void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		return p == MAP_FAILED ? NULL : p;
	}
	void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	if (p)
		memset(p, 0, bytes);
	return p;
}

void sk_free(void *ptr, size_t bytes)
{
	if (!ptr)
		return;
	if (bytes == 0)
		bytes = 64;
	if (bytes >= SK_MMAP_MIN)
		munmap(ptr, bytes);
	else
		free(ptr);
}
