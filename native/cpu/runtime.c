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
 *
 * Scheduler support (libml/sched, REEF §4-§5), all opt-in:
 *   - launches of a block range (sk_launch_range): a kernel whose first
 *     blocks already ran elsewhere continues where it stopped;
 *   - a virtual host queue per stream (sk_hq_*): launches append to an
 *     unbounded list, and at most `window` kernels are in the ring (the
 *     device queue) at a time; the unit that completes a kernel moves the
 *     next ones over, so no transmitter thread is needed. sk_hq_preempt
 *     detaches the list in O(1) and hands it to the pool's collector
 *     thread, which frees it off the critical path, then sets the flag;
 *   - timestamps: each launch records when its first block started; a
 *     stream records when it last drained and when a marked kernel
 *     started (preemption latency);
 *   - dynamic kernel padding (sk_pad_*): while an RT stream's kernel leaves
 *     units idle, those units run blocks of offered best-effort kernels
 *     that fit the RT kernel's remaining time (rule 1) and memory-bandwidth
 *     budget (rule 2).
 */
#define _GNU_SOURCE
#include "sluice_cpu.h"
#include "../padsel/padsel.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <stdio.h>
#include <unistd.h>

#define SK_MAX_STREAMS 256
#define SK_MAX_PRIO 8
/* words of a launch's done-block bit map (blocks 0..255) */
#define SK_DONE_WORDS 4
#define SK_SPIN_NS 60000 /* how long an idle unit spins before sleeping */
#define SK_SPIN_BUSY_NS 20000000 /* the same while its streams have work */

typedef struct sk_slot {
	sk_kernel *k;
	int64_t idx;
	uint64_t mask;
	int64_t grid;     /* blocks in this launch */
	int64_t done;
	int64_t base;     /* kernel block of the launch's first block */
	int64_t start_ns; /* when its first block was claimed (0 = not yet) */
	int64_t est_ns;   /* estimated kernel time (padding), 0 = unknown */
	int64_t bw;       /* memory-bandwidth demand, MB/s (padding) */
	int64_t blk_ns;   /* estimated block time (padding), 0 = unknown */
	int64_t last_ns;  /* when its last block was claimed (0 = not yet) */
	uint64_t done_bits[SK_DONE_WORDS]; /* blocks 0..255 of the launch that
					     ran to their end */
} sk_slot;

/* A test hook (sk_stream_hold_at, sk_pool_hold_from): the unit that claims
 * the block it names waits, past the block's prologue and before its body,
 * until the test releases it (or, with SK_HOLD_UNTIL_FLAG, until the
 * stream's preemption flag is set), so a test can script "X happens while
 * kernel k runs" instead of hoping for it. idx < 0: not armed (the only
 * cost when off is that load). */
typedef struct sk_hold {
	int64_t idx;      /* execution index (-1 = off) */
	int64_t blk;      /* block of the kernel */
	int32_t mode;     /* SK_HOLD_* */
	uint32_t gen;     /* bumped by a release */
	int32_t holding;  /* units waiting now */
	int64_t holds;    /* holds reached */
} sk_hold;

#define SK_HOLD_UNTIL_FLAG 1 /* also let go when the stream's flag is set */
#define SK_HOLD_FROM 2       /* any block of any index >= idx */
#define SK_HOLD_NONPRIO 4    /* only streams off the priority list */

static void hold_release(sk_hold *h);

/* A launch waiting in a stream's virtual host queue. */
typedef struct sk_hq_node {
	struct sk_hq_node *next;
	sk_kernel *k;
	int64_t idx, base, count, est_ns, bw, blk_ns;
	uint64_t mask;
} sk_hq_node;

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
	/* virtual host queue (hq_lock guards the list, the node cache and
	 * every ring launch of an hq stream) */
	_Alignas(64) int32_t hq_lock;
	int32_t hq_on;
	uint32_t window;
	int64_t hq_len;
	sk_hq_node *hq_head, *hq_tail, *hq_free;
	/* timestamps */
	_Alignas(64) int64_t drain_ns;
	int64_t idle_ns;   /* when the last block running under the flag ended */
	/* the launch in progress when the flag evicted the ring: its index,
	 * first block, block count and completed blocks (ev_idx -1: none) */
	int64_t ev_idx, ev_base, ev_grid;
	uint64_t ev_bits[SK_DONE_WORDS];
	int32_t running;   /* blocks running now */
	int32_t notify_fd; /* written (eventfd) each time the stream drains */
	uint32_t mark_seq;
	int32_t mark_armed;
	int64_t mark_ns;
	int32_t prio;      /* on the pool's priority list */
	sk_ctx ictx;       /* the calling thread's context (sk_run_inline) */
	_Alignas(64) sk_hold hold; /* test hook */
	/* test hook (sk_stream_stall_claim): a unit held between reading the
	 * ticket and reading its slot; claim_done counts the claims such a
	 * unit finished after its release */
	_Alignas(64) sk_hold claim;
	int64_t claim_done;
	/* test hook (sk_stream_stall_count): a unit held right after it
	 * counted a finished block; count_done counts such units' counts that
	 * ended after their release */
	_Alignas(64) sk_hold count;
	int64_t count_done;
};

typedef struct sk_unit {
	sk_pool *pool;
	int id;
	int cpu;
	pthread_t thread;
	sk_ctx ctx;
	int32_t tid; /* kernel thread id (0 until the unit has started) */
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
	/* collector of detached host queues */
	_Alignas(64) sk_hq_node *gc_list;
	uint32_t gc_gen;
	int32_t gc_started;
	int32_t gc_stop;
	int64_t gc_freed;
	pthread_t gc_thread;
	/* dynamic kernel padding */
	_Alignas(64) sk_pad *pad;
	int32_t pad_busy; /* units inside a padding block or selection */
	int32_t pad_noflag;
	/* streams units visit first (sk_stream_set_priority) */
	sk_stream *prio[SK_MAX_PRIO];
	int32_t nprio;
	_Alignas(64) sk_hold hold; /* test hook (sk_pool_hold_from) */
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

void sk_kernel_set_checks(sk_kernel *k, int64_t checks)
{
	k->checks = checks < 0 ? 0 : (checks > 1024 ? 1024 : checks);
}

void sk_kernel_set_check_work(sk_kernel *k, int64_t flops, int64_t bytes)
{
	k->check_flops = flops > 0 ? flops : 0;
	k->check_bytes = bytes > 0 ? bytes : 0;
}

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
	[SK_OP_QUANT] = {sk_prep_quant, sk_block_quant},
	[SK_OP_QGEMM] = {sk_prep_qgemm, sk_block_qgemm},
	[SK_OP_GRIDSAMPLE] = {sk_prep_gridsample, sk_block_gridsample},
	[SK_OP_TOPK] = {sk_prep_topk, sk_block_topk},
	[SK_OP_ROIALIGN] = {sk_prep_roialign, sk_block_roialign},
	[SK_OP_DET] = {sk_prep_det, sk_block_det},
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

int64_t sk_split_work(int64_t total, int units, int64_t by)
{
	int64_t want = (int64_t)units * 4;
	if (want > by)
		want = by;
	return sk_split(total, want, 1);
}

/* ---- streams ------------------------------------------------------------ */

static void hq_lock(sk_stream *s);
static void hq_unlock(sk_stream *s);
static void hq_free_chain(sk_hq_node *n);
static void hq_reset(sk_stream *s);
static int hq_pump_locked(sk_stream *s, uint32_t completed);
static void hq_publish_locked(sk_stream *s, int moved);
static void pool_kick(sk_pool *p);
static int hold_wait(sk_hold *h, sk_stream *s, int64_t idx, int64_t b);

/* stream_finish counts n finished blocks of kernel seq (slot sl); the unit
 * that counts the last one completes the kernel. The launch's block count
 * is read before the count is added: once it is, the kernel may complete
 * on another unit and the slot be refilled with a later launch, and a unit
 * held off its core right after the add that read the new launch's
 * (smaller) count would complete a kernel a second time, moving the
 * stream back to an old sequence number (a later job's kernels then ran
 * out of order, one job in tens of thousands under CPU contention). */
static void stream_finish(sk_stream *s, uint32_t seq, sk_slot *sl, int64_t n)
{
	int64_t grid = LDR(&sl->grid);
	int64_t hold_idx = -1;
	if (__builtin_expect(LDR(&s->count.idx) >= 0, 0))
		hold_idx = LDR(&sl->idx);
	int64_t d = __atomic_add_fetch(&sl->done, n, __ATOMIC_ACQ_REL);
	int held = hold_idx >= 0 && hold_wait(&s->count, s, hold_idx, 0);
	if (d < grid) {
		if (held)
			__atomic_add_fetch(&s->count_done, 1, __ATOMIC_SEQ_CST);
		return;
	}
	sk_kernel *k = sl->k;
	int64_t t0 = __atomic_exchange_n(&k->stat_t0, 0, __ATOMIC_RELAXED);
	if (LDR(&s->profile) && t0) {
		__atomic_add_fetch(&k->stat_wall_ns, now_ns() - t0, __ATOMIC_RELAXED);
		__atomic_add_fetch(&k->stat_runs, 1, __ATOMIC_RELAXED);
	}
	uint32_t next = seq + 1;
	int pumped = 0;
	if (__atomic_load_n(&s->flag, __ATOMIC_SEQ_CST)) {
		/* reset the queue: evict every queued kernel (and the host queue,
		 * when the flag was set without sk_hq_preempt) */
		if (LDR(&s->hq_on))
			hq_reset(s);
		if (LDR(&s->ev_idx) == -2) {
			/* the first launch evicted after sk_hq_preempt: where the
			 * stream stood */
			STR(&s->ev_base, LDR(&sl->base));
			STR(&s->ev_grid, LDR(&sl->grid));
			for (int w = 0; w < SK_DONE_WORDS; w++)
				STR(&s->ev_bits[w], __atomic_load_n(&sl->done_bits[w], __ATOMIC_ACQUIRE));
			ST(&s->ev_idx, LDR(&sl->idx));
		}
		next = LD(&s->tail);
		ST(&s->completed, next);
		ST(&s->ticket, (uint64_t)next << 32);
	} else if (LDR(&s->hq_on)) {
		/* move host-queue launches into the window: the completion is
		 * published before the new tail (so tail - completed never
		 * exceeds the window) and the host-queue length is lowered last
		 * (so a waiter never sees an empty ring and an empty host queue
		 * while launches are in transit) */
		hq_lock(s);
		pumped = hq_pump_locked(s, next);
		ST(&s->completed, next);
		ST(&s->ticket, (uint64_t)next << 32);
		hq_publish_locked(s, pumped);
		hq_unlock(s);
	} else {
		ST(&s->completed, next);
		ST(&s->ticket, (uint64_t)next << 32);
	}
	int drained_now = next == LD(&s->tail);
	if (drained_now)
		STR(&s->drain_ns, now_ns());
	/* waiting: 1 = a waiter wants the queue drained, 2 = any completion */
	__atomic_add_fetch(&s->done_gen, 1, __ATOMIC_SEQ_CST);
	int32_t w = __atomic_load_n(&s->waiting, __ATOMIC_SEQ_CST);
	if (w == 2 || (w == 1 && next == LD(&s->tail)))
		futex(&s->done_gen, FUTEX_WAKE_PRIVATE, INT_MAX);
	/* the next kernel's blocks are claimable now: wake units that went to
	 * sleep while the last blocks of this one ran (else a long tail block
	 * leaves the rest of the run to one unit) */
	if (pumped || ((int32_t)(LD(&s->tail) - next) > 0 &&
		       __atomic_load_n(&s->pool->sleepers, __ATOMIC_SEQ_CST)))
		pool_kick(s->pool);
	if (drained_now) {
		/* drain notification (an eventfd a waiter polls) */
		int fd = LDR(&s->notify_fd);
		if (fd >= 0) {
			uint64_t one = 1;
			ssize_t r = write(fd, &one, sizeof(one));
			(void)r;
		}
	}
	if (held)
		__atomic_add_fetch(&s->count_done, 1, __ATOMIC_SEQ_CST);
}

static int hold_wait(sk_hold *h, sk_stream *s, int64_t idx, int64_t b);

/* hold_point is where the test hooks hold a block (see sk_hold). */
static inline void hold_point(sk_stream *s, int64_t idx, int64_t b)
{
	if (__builtin_expect(LDR(&s->hold.idx) >= 0, 0))
		hold_wait(&s->hold, s, idx, b);
	if (__builtin_expect(LDR(&s->pool->hold.idx) >= 0, 0))
		hold_wait(&s->pool->hold, s, idx, b);
}

/* pre_idx while the hook fires: one unit is setting the flag */
#define SK_PRE_FIRING (-2)

/* preempt_hook is sk_stream_preempt_at's test hook: the stream preempts
 * itself as the claim that follows the first blk claims of slot sl (read
 * under ticket t) is about to be made, if that is the claim the hook names
 * and t is still the stream's ticket (with claims from both ends, blk
 * counts claims, not block numbers: blk 0 is the kernel's first claim,
 * so no block of it runs). Exactly one unit fires it: the one that moves
 * pre_idx to SK_PRE_FIRING. It sets the flag, then disarms the hook;
 * units that come by meanwhile wait for that, so none claims the block (or
 * a later one) and passes its prologue before the flag is set. A unit that
 * lost the race never sets the flag: a late store could otherwise preempt
 * the next run of the stream, after the test has disarmed the hook and
 * restored the stream. */
static void preempt_hook(sk_stream *s, sk_slot *sl, uint64_t t, uint32_t claimed)
{
	int64_t pi = LD(&s->pre_idx);
	if (pi != SK_PRE_FIRING) {
		if (pi < 0 || LDR(&sl->idx) != pi || LDR(&sl->base) + (int64_t)claimed != LD(&s->pre_blk))
			return;
		/* the slot read is the current kernel's only if the ticket has
		 * not moved (see try_block) */
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (LDR(&s->ticket) != t)
			return;
		if (__atomic_compare_exchange_n(&s->pre_idx, &pi, SK_PRE_FIRING, 0, __ATOMIC_SEQ_CST,
						__ATOMIC_SEQ_CST)) {
			__atomic_store_n(&s->flag, 1, __ATOMIC_SEQ_CST);
			ST(&s->pre_idx, -1);
			return;
		}
	}
	/* another unit fires it (or the hook changed): wait for it */
	while (LD(&s->pre_idx) == SK_PRE_FIRING)
		cpu_relax();
}

/* Two-ended claims. A launch of at most SK_TWO_END_MAX blocks is claimed
 * from both ends: the first half of the units its mask names take blocks
 * from the front, the others from the back, until the two meet (the
 * ticket's low 32 bits hold the front count in the low 16, the back count
 * in the high 16). Consecutive kernels whose blocks cut the same data the
 * same way (a batch's images, a layer's channels) then mostly leave each
 * unit the data it wrote itself, which it reads at more than twice the
 * speed of lines another core wrote (the 2-vCPU AMD EPYC VM: 60 against 26
 * GB/s). Which unit runs a block never changes its result. Longer launches
 * are claimed from the front only. */
#define SK_TWO_END_MAX 65535

/* claimed_blocks is how many blocks of a launch of grid blocks ticket t
 * says are claimed. */
static inline int64_t claimed_blocks(uint64_t t, int64_t grid)
{
	uint32_t lo = (uint32_t)t;
	if (grid <= SK_TWO_END_MAX)
		return (int64_t)(lo & 0xffff) + (int64_t)(lo >> 16);
	return (int64_t)lo;
}

/* claims_back reports whether unit id claims a two-ended launch over the
 * units of mask from the back: the second half of them, by rank. */
static inline int claims_back(uint64_t mask, int id)
{
	int n = __builtin_popcountll(mask);
	int rank = __builtin_popcountll(mask & ((1ULL << id) - 1));
	return 2 * rank >= n && n > 1;
}

/* claim_block claims and runs one block of s's current kernel on unit u,
 * t being the ticket the unit read. Returns 1 when it made progress (or
 * lost a race), 0 when s has nothing for this unit now. */
static int claim_block(sk_stream *s, sk_unit *u, uint64_t t)
{
	uint32_t seq = (uint32_t)(t >> 32);
	uint32_t tail = LD(&s->tail);
	if ((int32_t)(tail - seq) <= 0)
		return 0;
	sk_slot *sl = &s->ring[seq & s->capmask];
	uint64_t mask = LDR(&sl->mask);
	int64_t grid = LDR(&sl->grid);
	/* t may be stale: a unit held off its core between reading the ticket
	 * and the slot can read a slot the stream has since reused for a later
	 * launch (that launch's mask, grid and index). The slot of the current
	 * kernel is never rewritten before the kernel completes, so the slot
	 * read is the kernel's own when the ticket has not moved since. */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__builtin_expect(LDR(&s->ticket) != t, 0))
		return 1;
	int64_t claimed = claimed_blocks(t, grid);
	if (!((mask >> u->id) & 1) || claimed >= grid)
		return 0;
	/* the block this claim takes, and the ticket after it */
	uint32_t lo = (uint32_t)t, blk;
	uint64_t next;
	if (grid > SK_TWO_END_MAX) {
		blk = lo;
		next = t + 1;
	} else if (claims_back(mask, u->id)) {
		blk = (uint32_t)(grid - 1 - (int64_t)(lo >> 16));
		next = t + (1ULL << 16);
	} else {
		blk = lo & 0xffff;
		next = t + 1;
	}
	if (__builtin_expect(LD(&s->pre_idx) != -1, 0))
		preempt_hook(s, sl, t, (uint32_t)claimed);
	if (__atomic_load_n(&s->flag, __ATOMIC_RELAXED)) {
		/* lazy eviction, batched: claim the rest of the kernel at once
		 * (the front count moved up to meet the back) */
		uint64_t nt = ((uint64_t)seq << 32) |
			      (grid > SK_TWO_END_MAX ? (uint32_t)grid
						     : (lo & 0xffff0000u) | (uint32_t)(grid - (lo >> 16)));
		if (__atomic_compare_exchange_n(&s->ticket, &t, nt, 0,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			stream_finish(s, seq, sl, grid - claimed);
		return 1;
	}
	if (!__atomic_compare_exchange_n(&s->ticket, &t, next, 0,
					 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return 1;
	sk_kernel *k = LDR(&sl->k);
	int64_t idx = LDR(&sl->idx);
	int64_t b = LDR(&sl->base) + (int64_t)blk;
	int prof = LDR(&s->profile);
	int64_t t0 = 0;
	if (claimed == 0) {
		t0 = now_ns();
		ST(&sl->start_ns, t0);
		if (LDR(&s->mark_armed) && seq == LDR(&s->mark_seq)) {
			STR(&s->mark_ns, t0);
			ST(&s->mark_armed, 0);
		}
		if (prof)
			k->stat_t0 = t0;
		/* a kernel start may open room for padding on idle units */
		if (LDR(&s->pool->pad))
			pool_kick(s->pool);
	} else if (prof) {
		t0 = now_ns();
	}
	if (claimed == grid - 1 && LDR(&sl->est_ns) > 0)
		STR(&sl->last_ns, now_ns()); /* padding's tail estimate */
	u->ctx.flag = &s->flag;
	__atomic_add_fetch(&s->running, 1, __ATOMIC_SEQ_CST);
	int ran = 0;
#if SK_CHECKS
	/* preemption prologue: exit if evicted, else record the index */
	if (!__atomic_load_n(&s->flag, __ATOMIC_RELAXED)) {
		if (LDR(&s->exec_idx) != idx)
			STR(&s->exec_idx, idx);
		hold_point(s, idx, b);
		sk_table[k->op].block(k, b, &u->ctx);
		/* a block that returns with the flag clear ran to its end */
		ran = !__atomic_load_n(&s->flag, __ATOMIC_SEQ_CST);
	}
#else
	if (LDR(&s->exec_idx) != idx)
		STR(&s->exec_idx, idx);
	hold_point(s, idx, b);
	sk_table[k->op].block(k, b, &u->ctx);
	ran = 1;
#endif
	if (ran && blk < 64 * SK_DONE_WORDS)
		__atomic_fetch_or(&sl->done_bits[blk >> 6], 1ULL << (blk & 63),
				  __ATOMIC_RELEASE);
	/* the last running block of a preempted stream: its units are idle */
	if (__atomic_sub_fetch(&s->running, 1, __ATOMIC_SEQ_CST) == 0 &&
	    __atomic_load_n(&s->flag, __ATOMIC_SEQ_CST))
		__atomic_store_n(&s->idle_ns, now_ns(), __ATOMIC_RELEASE);
	if (prof) {
		__atomic_add_fetch(&k->stat_block_ns, now_ns() - t0,
				   __ATOMIC_RELAXED);
		__atomic_add_fetch(&k->stat_blocks, 1, __ATOMIC_RELAXED);
	}
	stream_finish(s, seq, sl, 1);
	return 1;
}

/* try_block claims and runs one block of s's current kernel on unit u (see
 * claim_block). Unarmed, the claim hook costs one load. */
static inline int try_block(sk_stream *s, sk_unit *u)
{
	uint64_t t = LD(&s->ticket);
	if (__builtin_expect(LDR(&s->claim.idx) >= 0, 0) && hold_wait(&s->claim, s, 0, 0)) {
		int r = claim_block(s, u, t);
		__atomic_add_fetch(&s->claim_done, 1, __ATOMIC_SEQ_CST);
		return r;
	}
	return claim_block(s, u, t);
}

static int try_pad(sk_pool *p, sk_unit *u);

/* prio_ready reports whether a priority stream has a block unit u could
 * claim now. */
static int prio_ready(sk_pool *p, sk_unit *u)
{
	int np = LD(&p->nprio);
	for (int j = 0; j < np; j++) {
		sk_stream *s = LD(&p->prio[j]);
		if (!s)
			continue;
		uint64_t t = LD(&s->ticket);
		uint32_t seq = (uint32_t)(t >> 32);
		if ((int32_t)(LD(&s->tail) - seq) <= 0)
			continue;
		sk_slot *sl = &s->ring[seq & s->capmask];
		int64_t grid = LDR(&sl->grid);
		if (((LDR(&sl->mask) >> u->id) & 1) && claimed_blocks(t, grid) < grid)
			return 1;
	}
	return 0;
}

static int scan(sk_pool *p, sk_unit *u, int start)
{
	int did = 0;
	/* priority streams first: their blocks before any other stream's
	 * (and before evicting a preempted stream) */
	int np = LD(&p->nprio);
	for (int j = 0; j < np; j++) {
		sk_stream *s = LD(&p->prio[j]);
		if (!s)
			continue;
		while (try_block(s, u))
			did = 1;
	}
	if (did)
		return did;
	int n = LD(&p->nstreams);
	for (int j = 0; j < n; j++) {
		sk_stream *s = LD(&p->streams[(start + j) % n]);
		if (!s)
			continue;
		while (try_block(s, u)) {
			did = 1;
			if (np && prio_ready(p, u))
				return did; /* back to the priority streams */
		}
	}
	if (!did && LDR(&p->pad))
		did = try_pad(p, u);
	return did;
}

/* pending reports whether a stream has launched kernels not yet completed
 * whose current kernel may run on unit u. */
static int pending(sk_pool *p, sk_unit *u)
{
	int n = LD(&p->nstreams);
	for (int j = 0; j < n; j++) {
		sk_stream *s = LD(&p->streams[j]);
		if (!s)
			continue;
		uint32_t c = LD(&s->completed);
		if (c == LD(&s->tail))
			continue;
		if ((LDR(&s->ring[c & s->capmask].mask) >> u->id) & 1)
			return 1;
	}
	return 0;
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
	ST(&u->tid, (int32_t)syscall(SYS_gettid));
	int start = 0;
	while (!LD(&p->stop)) {
		if (scan(p, u, start++)) 
			continue;
		int64_t t0 = now_ns();
		int found = 0;
		/* spin while a stream this unit serves has kernels in flight (the
		 * next kernel starts when the last blocks of this one end: a unit
		 * asleep then wakes too late), else SK_SPIN_NS, then sleep */
		int64_t spin = pending(p, u) ? SK_SPIN_BUSY_NS : SK_SPIN_NS;
		while (now_ns() - t0 < spin && !LD(&p->stop)) {
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

sk_pool *sk_pool_create(int units, int pin)
{
	if (units < 1 || units > SK_MAX_UNITS)
		return NULL;
	sk_gemm_isa(); /* pick the GEMM core before any unit runs */
	sk_pool *p = aligned_alloc(64, (sizeof(sk_pool) + 63) & ~(size_t)63);
	if (!p)
		return NULL;
	memset(p, 0, sizeof(*p));
	p->units = units;
	p->pin = pin;
	p->all_mask = units == 64 ? ~0ULL : ((1ULL << units) - 1);
	p->hold.idx = -1;
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
	hold_release(&p->hold); /* held units see stop */
	for (int i = 0; i < p->units; i++)
		pthread_join(p->unit[i].thread, NULL);
	if (p->gc_started) {
		ST(&p->gc_stop, 1);
		__atomic_add_fetch(&p->gc_gen, 1, __ATOMIC_SEQ_CST);
		futex(&p->gc_gen, FUTEX_WAKE_PRIVATE, INT_MAX);
		pthread_join(p->gc_thread, NULL);
	}
	hq_free_chain(p->gc_list);
	for (int i = 0; i < SK_MAX_STREAMS; i++) {
		if (p->streams[i]) {
			hq_free_chain(p->streams[i]->hq_head);
			hq_free_chain(p->streams[i]->hq_free);
			free(p->streams[i]->ring);
			free(p->streams[i]->ictx.scratch);
			free(p->streams[i]);
		}
	}
	pthread_mutex_destroy(&p->mu);
	free(p);
}

int sk_pool_units(const sk_pool *p) { return p->units; }

int sk_pool_set_nice(sk_pool *p, int nice)
{
	int r = SK_OK;
	for (int i = 0; i < p->units; i++) {
		sk_unit *u = &p->unit[i];
		int32_t tid;
		while (!(tid = LD(&u->tid)))
			sched_yield();
		if (setpriority(PRIO_PROCESS, (id_t)tid, nice) != 0)
			r = SK_ERR;
	}
	return r;
}

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
		if (slot < 0) { /* every slot holds a stream, none free and big enough */
			pthread_mutex_unlock(&p->mu);
			return NULL;
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
	s->prio = 0;
	ST(&s->hold.idx, -1);
	ST(&s->claim.idx, -1);
	ST(&s->count.idx, -1);
	s->waiting = 0;
	s->hq_on = 0;
	s->window = 0;
	s->mark_armed = 0;
	s->mark_ns = 0;
	s->drain_ns = 0;
	s->notify_fd = -1;
	s->ev_idx = -1;
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
	if (LDR(&s->hq_on)) {
		hq_lock(s);
		sk_hq_node *h = s->hq_head;
		s->hq_head = s->hq_tail = NULL;
		__atomic_store_n(&s->hq_len, 0, __ATOMIC_SEQ_CST);
		hq_unlock(s);
		hq_free_chain(h);
	}
	sk_stream_preempt(s);
	sk_stream_hold_release(s); /* a unit held by a test hook */
	hold_release(&s->claim);
	hold_release(&s->count);
	sk_stream_sync(s);
	sk_stream_set_priority(s, 0);
	free(s->ictx.scratch);
	s->ictx.scratch = NULL;
	s->ictx.scratch_cap = 0;
	sk_pool *p = s->pool;
	pthread_mutex_lock(&p->mu);
	s->in_use = 0;
	pthread_mutex_unlock(&p->mu);
}

static void fill_slot(sk_stream *s, uint32_t t, sk_kernel *k, int64_t idx,
		      uint64_t mask, int64_t base, int64_t count,
		      int64_t est_ns, int64_t bw, int64_t blk_ns)
{
	mask &= s->pool->all_mask;
	if (!mask)
		mask = s->pool->all_mask;
	sk_slot *sl = &s->ring[t & s->capmask];
	STR(&sl->k, k);
	STR(&sl->idx, idx);
	STR(&sl->mask, mask);
	STR(&sl->grid, count);
	STR(&sl->done, 0);
	STR(&sl->base, base);
	STR(&sl->start_ns, 0);
	STR(&sl->est_ns, est_ns);
	STR(&sl->bw, bw);
	STR(&sl->blk_ns, blk_ns);
	STR(&sl->last_ns, 0);
	for (int w = 0; w < SK_DONE_WORDS; w++)
		STR(&sl->done_bits[w], 0);
}

static int launch_range(sk_stream *s, sk_kernel *k, int64_t idx, uint64_t mask,
			int64_t blk0, int64_t blk1)
{
	uint32_t t = LDR(&s->tail);
	uint32_t c = LD(&s->completed);
	if (t - c >= s->cap)
		return SK_ERR;
	if (k->grid < 1 || blk0 < 0 || blk1 > k->grid || blk0 >= blk1)
		return SK_ERR;
	fill_slot(s, t, k, idx, mask, blk0, blk1 - blk0, 0, 0, 0);
	__atomic_store_n(&s->tail, t + 1, __ATOMIC_SEQ_CST);
	return SK_OK;
}

static int launch(sk_stream *s, sk_kernel *k, int64_t idx, uint64_t mask)
{
	if (k->grid < 1)
		return SK_ERR;
	return launch_range(s, k, idx, mask, 0, k->grid);
}

int sk_launch(sk_stream *s, sk_kernel *k, int64_t idx, uint64_t mask)
{
	int r = launch(s, k, idx, mask);
	if (r == SK_OK)
		pool_kick(s->pool);
	return r;
}

int sk_launch_range(sk_stream *s, sk_kernel *k, int64_t idx, uint64_t mask,
		    int64_t blk0, int64_t blk1)
{
	int r = launch_range(s, k, idx, mask, blk0, blk1);
	if (r == SK_OK)
		pool_kick(s->pool);
	return r;
}

/* drained reports whether s has nothing left: an empty ring and, for a
 * host-queue stream, an empty host queue (read first: it is lowered only
 * after the ring's tail is published). */
static int drained(sk_stream *s)
{
	if (LDR(&s->hq_on) && __atomic_load_n(&s->hq_len, __ATOMIC_SEQ_CST) > 0)
		return 0;
	return LD(&s->completed) == LD(&s->tail);
}

/* wait_until waits until completed has reached target (wrap-safe; ignored
 * when target_on is 0) or the stream is drained. */
static void wait_until(sk_stream *s, uint32_t target, int32_t mode, int target_on)
{
	for (;;) {
		uint32_t g = __atomic_load_n(&s->done_gen, __ATOMIC_SEQ_CST);
		uint32_t c = LD(&s->completed);
		if ((target_on && (int32_t)(c - target) >= 0) || drained(s))
			break;
		__atomic_store_n(&s->waiting, mode, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&s->done_gen, __ATOMIC_SEQ_CST) != g)
			continue;
		c = LD(&s->completed);
		if ((target_on && (int32_t)(c - target) >= 0) || drained(s))
			break;
		futex(&s->done_gen, FUTEX_WAIT_PRIVATE, g);
	}
	__atomic_store_n(&s->waiting, 0, __ATOMIC_SEQ_CST);
}

int sk_stream_sync(sk_stream *s)
{
	/* a plain stream: what was launched before the call; a host-queue
	 * stream: everything (units keep moving launches into the ring) */
	int hq = LDR(&s->hq_on);
	wait_until(s, hq ? 0 : LD(&s->tail), 1, !hq);
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
			wait_until(s, LD(&s->completed) + 1, 2, 1);
		}
		/* start the units on the first kernel at once */
		if (i == start || kicked)
			pool_kick(s->pool);
	}
	pool_kick(s->pool);
	return sk_stream_sync(s);
}

int sk_run_inline(sk_stream *s, sk_kernel *ks, int n, int start)
{
	if (start < 0)
		start = 0;
	s->ictx.unit = 0;
	s->ictx.flag = &s->flag;
	for (int i = start; i < n; i++) {
		sk_kernel *k = &ks[i];
		if (k->op == SK_OP_NOP)
			continue;
		if (k->grid < 1)
			return SK_ERR;
		for (int64_t b = 0; b < k->grid; b++) {
			/* the test hook (sk_stream_preempt_at), then the prologue
			 * of every block, as on a unit */
			if (__builtin_expect(LD(&s->pre_idx) == i, 0) && LD(&s->pre_blk) == b) {
				__atomic_store_n(&s->flag, 1, __ATOMIC_SEQ_CST);
				ST(&s->pre_idx, -1);
			}
			if (__atomic_load_n(&s->flag, __ATOMIC_RELAXED))
				return SK_PREEMPTED;
			if (LDR(&s->exec_idx) != i)
				STR(&s->exec_idx, i);
			sk_table[k->op].block(k, b, &s->ictx);
		}
	}
	/* a block that returned with the flag set may have stopped early */
	return __atomic_load_n(&s->flag, __ATOMIC_SEQ_CST) ? SK_PREEMPTED : SK_OK;
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

/* ---- test hooks: holding a block (sk_hold) ------------------------------ */

static void hold_arm(sk_hold *h, int64_t idx, int64_t blk, int mode)
{
	STR(&h->blk, blk);
	STR(&h->mode, mode);
	ST(&h->idx, idx < 0 ? -1 : idx);
}

static void hold_release(sk_hold *h)
{
	/* a release with no unit holding cancels the hold not yet reached: a
	 * unit that reaches the block later must not wait for a release that
	 * has been. With a unit holding, a hold armed meanwhile (the next
	 * block's) stays armed. A unit between its take and its count reads
	 * the generation before its take, so it sees this release. */
	if (!__atomic_load_n(&h->holding, __ATOMIC_SEQ_CST))
		__atomic_store_n(&h->idx, -1, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&h->gen, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&h->holding, __ATOMIC_SEQ_CST))
		futex(&h->gen, FUTEX_WAKE_PRIVATE, INT_MAX);
}

/* hold_wait holds the block (idx, b) of s on the calling unit if h is
 * armed for it: one unit takes the hold (it disarms) and waits, before
 * the block's body, until a release, the pool's stop or, with
 * SK_HOLD_UNTIL_FLAG, the stream's flag. */
static int hold_wait(sk_hold *h, sk_stream *s, int64_t idx, int64_t b)
{
	int64_t hi = LD(&h->idx);
	if (hi < 0)
		return 0;
	int mode = LDR(&h->mode);
	if (mode & SK_HOLD_FROM) {
		if (idx < hi)
			return 0;
	} else if (idx != hi || b != LDR(&h->blk)) {
		return 0;
	}
	if ((mode & SK_HOLD_NONPRIO) && LD(&s->prio))
		return 0;
	/* the generation before the take: a release between the take and
	 * the wait is seen */
	uint32_t g = __atomic_load_n(&h->gen, __ATOMIC_SEQ_CST);
	if (!__atomic_compare_exchange_n(&h->idx, &hi, -1, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_RELAXED))
		return 0; /* another unit took it, or it was re-armed */
	__atomic_add_fetch(&h->holding, 1, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&h->holds, 1, __ATOMIC_SEQ_CST);
	/* a timed futex wait: the flag and the pool's stop are polled */
	while (__atomic_load_n(&h->gen, __ATOMIC_SEQ_CST) == g &&
	       !LD(&s->pool->stop) &&
	       !((mode & SK_HOLD_UNTIL_FLAG) && __atomic_load_n(&s->flag, __ATOMIC_SEQ_CST))) {
		struct timespec ts = {0, 100000};
		syscall(SYS_futex, &h->gen, FUTEX_WAIT_PRIVATE, g, &ts, NULL, 0);
	}
	__atomic_sub_fetch(&h->holding, 1, __ATOMIC_SEQ_CST);
	return 1;
}

void sk_stream_hold_at(sk_stream *s, int64_t idx, int64_t blk, int until_flag)
{
	hold_arm(&s->hold, idx, blk, until_flag ? SK_HOLD_UNTIL_FLAG : 0);
}

void sk_stream_hold_release(sk_stream *s) { hold_release(&s->hold); }

int64_t sk_stream_holds(const sk_stream *s) { return LD(&s->hold.holds); }

int32_t sk_stream_running(const sk_stream *s) { return LD(&s->running); }

void sk_stream_claims(const sk_stream *s, int64_t *front, int64_t *back)
{
	uint64_t t = LD(&s->ticket);
	uint32_t seq = (uint32_t)(t >> 32), lo = (uint32_t)t;
	*front = *back = 0;
	if ((int32_t)(LD(&s->tail) - seq) <= 0)
		return;
	if (LDR(&s->ring[seq & s->capmask].grid) > SK_TWO_END_MAX) {
		*front = lo;
		return;
	}
	*front = lo & 0xffff;
	*back = lo >> 16;
}

int32_t sk_stream_holding(const sk_stream *s) { return LD(&s->hold.holding); }

void sk_stream_stall_claim(sk_stream *s) { hold_arm(&s->claim, 0, 0, SK_HOLD_FROM); }

void sk_stream_stall_release(sk_stream *s) { hold_release(&s->claim); }

int32_t sk_stream_stalled(const sk_stream *s) { return LD(&s->claim.holding); }

int64_t sk_stream_stalls_done(const sk_stream *s) { return LD(&s->claim_done); }

void sk_stream_stall_count(sk_stream *s, int64_t idx) { hold_arm(&s->count, idx, 0, SK_HOLD_FROM); }

void sk_stream_stall_count_release(sk_stream *s) { hold_release(&s->count); }

int32_t sk_stream_count_stalled(const sk_stream *s) { return LD(&s->count.holding); }

int64_t sk_stream_count_stalls_done(const sk_stream *s) { return LD(&s->count_done); }

void sk_pool_hold_from(sk_pool *p, int64_t idx, int until_flag)
{
	hold_arm(&p->hold, idx, 0,
		 SK_HOLD_FROM | SK_HOLD_NONPRIO | (until_flag ? SK_HOLD_UNTIL_FLAG : 0));
}

void sk_pool_hold_release(sk_pool *p) { hold_release(&p->hold); }

int64_t sk_pool_holds(const sk_pool *p) { return LD(&p->hold.holds); }

int32_t sk_pool_holding(const sk_pool *p) { return LD(&p->hold.holding); }

/* ---- virtual host queues (REEF §4.2) ------------------------------------ */

/* A lock shared by units and the threads that steer them: it spins a
 * little, then sleeps on a futex (0 free, 1 held, 2 held with sleepers).
 * A plain spinlock is a trap here: a steering thread that preempts a unit
 * holding the lock on the same core would spin until its time slice ends. */
static void sk_lock(int32_t *l)
{
	int32_t c = 0;
	if (__atomic_compare_exchange_n(l, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return;
	for (int i = 0; i < 200; i++) {
		cpu_relax();
		c = 0;
		if (LDR(l) == 0 &&
		    __atomic_compare_exchange_n(l, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return;
	}
	if (c != 2)
		c = __atomic_exchange_n(l, 2, __ATOMIC_ACQUIRE);
	while (c != 0) {
		futex((uint32_t *)l, FUTEX_WAIT_PRIVATE, 2);
		c = __atomic_exchange_n(l, 2, __ATOMIC_ACQUIRE);
	}
}

static void sk_unlock(int32_t *l)
{
	if (__atomic_exchange_n(l, 0, __ATOMIC_RELEASE) == 2)
		futex((uint32_t *)l, FUTEX_WAKE_PRIVATE, 1);
}

static void hq_lock(sk_stream *s) { sk_lock(&s->hq_lock); }

static void hq_unlock(sk_stream *s) { sk_unlock(&s->hq_lock); }

static void hq_free_chain(sk_hq_node *n)
{
	while (n) {
		sk_hq_node *next = n->next;
		free(n);
		n = next;
	}
}

/* hq_cache_put gives a chain of unused nodes back to s's node cache; the
 * chain is walked outside the lock. */
static void hq_cache_put(sk_stream *s, sk_hq_node *c)
{
	if (!c)
		return;
	sk_hq_node *t = c;
	while (t->next)
		t = t->next;
	hq_lock(s);
	t->next = s->hq_free;
	s->hq_free = c;
	hq_unlock(s);
}

/* hq_pump_locked fills ring slots from host-queue launches while fewer
 * than window kernels would be outstanding (completed is the completion
 * count to assume). It does not publish them: hq_publish_locked does.
 * Returns how many it filled. */
static int hq_pump_locked(sk_stream *s, uint32_t completed)
{
	int moved = 0;
	uint32_t t = LDR(&s->tail);
	while (s->hq_head && t - completed < s->window) {
		sk_hq_node *n = s->hq_head;
		s->hq_head = n->next;
		if (!s->hq_head)
			s->hq_tail = NULL;
		fill_slot(s, t, n->k, n->idx, n->mask, n->base, n->count,
			  n->est_ns, n->bw, n->blk_ns);
		t++;
		n->next = s->hq_free; /* node cache: no free() on this path */
		s->hq_free = n;
		moved++;
	}
	return moved;
}

static void hq_publish_locked(sk_stream *s, int moved)
{
	if (!moved)
		return;
	__atomic_store_n(&s->tail, LDR(&s->tail) + (uint32_t)moved, __ATOMIC_SEQ_CST);
	__atomic_sub_fetch(&s->hq_len, moved, __ATOMIC_SEQ_CST);
}

static void *gc_main(void *arg)
{
	sk_pool *p = arg;
	pthread_setname_np(pthread_self(), "sk-hq-gc");
	while (!LD(&p->gc_stop)) {
		uint32_t g = __atomic_load_n(&p->gc_gen, __ATOMIC_SEQ_CST);
		sk_hq_node *n = __atomic_exchange_n(&p->gc_list, NULL, __ATOMIC_ACQ_REL);
		int64_t freed = 0;
		while (n) {
			sk_hq_node *next = n->next;
			free(n);
			n = next;
			freed++;
		}
		if (freed)
			__atomic_add_fetch(&p->gc_freed, freed, __ATOMIC_RELAXED);
		/* sleep until woken or 5 ms passed: the preempting thread never
		 * makes a system call to hand over garbage */
		struct timespec ts = {0, 5000000};
		if (!LD(&p->gc_stop))
			syscall(SYS_futex, &p->gc_gen, FUTEX_WAIT_PRIVATE, g, &ts, NULL, 0);
	}
	return NULL;
}

int sk_hq_enable(sk_stream *s, int window)
{
	if (window < 1 || (uint32_t)window >= s->cap)
		return SK_ERR;
	sk_pool *p = s->pool;
	pthread_mutex_lock(&p->mu);
	if (!p->gc_started) {
		if (pthread_create(&p->gc_thread, NULL, gc_main, p) != 0) {
			pthread_mutex_unlock(&p->mu);
			return SK_ERR;
		}
		p->gc_started = 1;
	}
	pthread_mutex_unlock(&p->mu);
	hq_lock(s);
	s->window = (uint32_t)window;
	ST(&s->hq_on, 1);
	hq_unlock(s);
	return SK_OK;
}

int sk_hq_set_window(sk_stream *s, int window)
{
	if (window < 1 || (uint32_t)window >= s->cap)
		return SK_ERR;
	hq_lock(s);
	s->window = (uint32_t)window;
	int moved = hq_pump_locked(s, LD(&s->completed));
	hq_publish_locked(s, moved);
	hq_unlock(s);
	if (moved)
		pool_kick(s->pool);
	return SK_OK;
}

int64_t sk_hq_push(sk_stream *s, const sk_launch_desc *d, int n, int mark)
{
	if (!LDR(&s->hq_on) || n < 0)
		return -1;
	/* validate and build the chain outside the lock */
	sk_hq_node *head = NULL, *tail = NULL;
	int built = 0;
	hq_lock(s);
	sk_hq_node *cache = s->hq_free;
	s->hq_free = NULL;
	hq_unlock(s);
	for (int i = 0; i < n; i++) {
		sk_kernel *k = d[i].k;
		int64_t b0 = d[i].blk0, b1 = d[i].blk1;
		if (b1 <= 0)
			b1 = k ? k->grid : 0;
		if (!k || k->grid < 1 || b0 < 0 || b1 > k->grid || b0 >= b1) {
			hq_free_chain(head);
			hq_cache_put(s, cache);
			return -1;
		}
		sk_hq_node *nd = cache;
		if (nd)
			cache = nd->next;
		else if (!(nd = malloc(sizeof(*nd))))
			break;
		nd->next = NULL;
		nd->k = k;
		nd->idx = d[i].idx;
		nd->base = b0;
		nd->count = b1 - b0;
		nd->est_ns = d[i].est_ns;
		nd->blk_ns = d[i].blk_ns;
		nd->bw = d[i].bw;
		nd->mask = d[i].mask;
		if (tail)
			tail->next = nd;
		else
			head = nd;
		tail = nd;
		built++;
	}
	if (built < n) {
		hq_free_chain(head);
		hq_cache_put(s, cache);
		return -1;
	}
	hq_lock(s);
	int64_t first = (int64_t)(uint32_t)(LDR(&s->tail) + (uint32_t)LDR(&s->hq_len));
	if (mark) {
		STR(&s->mark_ns, 0);
		STR(&s->mark_seq, (uint32_t)first);
		ST(&s->mark_armed, 1);
	}
	if (head) {
		if (s->hq_tail)
			s->hq_tail->next = head;
		else
			s->hq_head = head;
		s->hq_tail = tail;
		__atomic_add_fetch(&s->hq_len, built, __ATOMIC_SEQ_CST);
	}
	int moved = hq_pump_locked(s, LD(&s->completed));
	hq_publish_locked(s, moved);
	hq_unlock(s);
	if (moved)
		pool_kick(s->pool);
	/* unused cached nodes go back once the launches are out */
	hq_cache_put(s, cache);
	return first;
}

/* hq_reset detaches the host queue in O(1) and hands it to the collector
 * (one CAS, no system call). */
static void hq_reset(sk_stream *s)
{
	hq_lock(s);
	sk_hq_node *h = s->hq_head, *tl = s->hq_tail;
	s->hq_head = s->hq_tail = NULL;
	__atomic_store_n(&s->hq_len, 0, __ATOMIC_SEQ_CST);
	hq_unlock(s);
	if (h) {
		sk_pool *p = s->pool;
		sk_hq_node *old = __atomic_load_n(&p->gc_list, __ATOMIC_RELAXED);
		do {
			tl->next = old;
		} while (!__atomic_compare_exchange_n(&p->gc_list, &old, h, 1,
						      __ATOMIC_RELEASE, __ATOMIC_RELAXED));
	}
}

int64_t sk_hq_preempt(sk_stream *s)
{
	int64_t t0 = now_ns();
	/* 1: reset the host queue in O(1): detach the list (the collector
	 * frees it) */
	hq_reset(s);
	STR(&s->ev_idx, -2); /* the evicting unit records the launch in progress */
	/* 2: the flag: queued blocks exit at their prologue, running blocks at
	 * their next check; the ring is dropped by the unit that evicts */
	__atomic_store_n(&s->idle_ns, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->flag, 1, __ATOMIC_SEQ_CST);
	/* no block running: the stream's units are idle already */
	if (__atomic_load_n(&s->running, __ATOMIC_SEQ_CST) == 0) {
		int64_t zero = 0;
		__atomic_compare_exchange_n(&s->idle_ns, &zero, now_ns(), 0,
					    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
	}
	return t0;
}

int64_t sk_hq_len(sk_stream *s)
{
	return __atomic_load_n(&s->hq_len, __ATOMIC_SEQ_CST);
}

int64_t sk_pool_gc_freed(const sk_pool *p)
{
	return __atomic_load_n(&p->gc_freed, __ATOMIC_RELAXED);
}

uint32_t sk_stream_outstanding(const sk_stream *s)
{
	/* tail first: completion is published before a new tail */
	uint32_t t = LD(&s->tail);
	int32_t d = (int32_t)(t - LD(&s->completed));
	return d > 0 ? (uint32_t)d : 0;
}

int64_t sk_now_ns(void) { return now_ns(); }

int64_t sk_stream_mark_ns(const sk_stream *s) { return LD(&s->mark_ns); }

int64_t sk_stream_drain_ns(const sk_stream *s) { return LD(&s->drain_ns); }

int64_t sk_stream_idle_ns(const sk_stream *s) { return LD(&s->idle_ns); }

int64_t sk_stream_evicted(const sk_stream *s, int64_t *base, int64_t *grid,
			  int64_t *first, int64_t *end)
{
	int64_t idx = LD(&s->ev_idx);
	if (idx < 0)
		return -1;
	*base = LDR(&s->ev_base);
	*grid = LDR(&s->ev_grid);
	int64_t f = 64 * SK_DONE_WORDS;
	for (int w = 0; w < SK_DONE_WORDS; w++) {
		uint64_t open = ~LDR(&s->ev_bits[w]);
		if (open) {
			f = 64 * w + __builtin_ctzll(open);
			break;
		}
	}
	*first = f;
	/* one past the last block that did not run to its end: claims come
	 * from both ends, so blocks at the back may have finished while the
	 * front did not (untracked blocks past 256 count as unfinished) */
	int64_t g = *grid, e = g;
	if (g <= 64 * SK_DONE_WORDS) {
		e = 0;
		for (int w = (int)SK_CDIV(g, 64) - 1; w >= 0; w--) {
			uint64_t open = ~LDR(&s->ev_bits[w]);
			if (64 * (w + 1) > g)
				open &= (1ULL << (g - 64 * w)) - 1;
			if (open) {
				e = 64 * w + 64 - __builtin_clzll(open);
				break;
			}
		}
	}
	*end = e;
	return idx;
}

void sk_stream_set_notify(sk_stream *s, int fd) { ST(&s->notify_fd, fd); }

int sk_stream_set_priority(sk_stream *s, int on)
{
	sk_pool *p = s->pool;
	int r = SK_OK;
	pthread_mutex_lock(&p->mu);
	int at = -1;
	for (int i = 0; i < p->nprio; i++)
		if (p->prio[i] == s)
			at = i;
	if (on && at < 0) {
		if (p->nprio < SK_MAX_PRIO) {
			ST(&p->prio[p->nprio], s);
			ST(&p->nprio, p->nprio + 1);
			ST(&s->prio, 1);
		} else {
			r = SK_ERR;
		}
	} else if (!on && at >= 0) {
		/* units may be reading the list: a slot is cleared, never moved */
		ST(&p->prio[at], NULL);
		ST(&s->prio, 0);
	}
	pthread_mutex_unlock(&p->mu);
	return r;
}

/* ---- dynamic kernel padding (REEF §5) ------------------------------------ */

static void pad_lock(sk_pad *pad) { sk_lock(&pad->lock); }

static void pad_unlock(sk_pad *pad) { sk_unlock(&pad->lock); }

/* pad_fits: version i of candidate c beside an RT kernel with rem_ns
 * left and rt_bw MB/s passes Rule 1 (padsel.h) and the cpu's Rule 2 (the
 * bandwidth budget); the rejections are counted by rule. */
static int pad_fits(const sk_pad *pad, const sk_pad_cand *c, int64_t i,
		    int64_t rem_ns, int64_t rt_bw, int64_t *r1, int64_t *r2)
{
	if (!sk_padsel_rule1((double)c->blk_ns[i], (double)rem_ns, pad->rule1_pct)) {
		(*r1)++;
		return 0;
	}
	if (pad->bw_budget > 0 && rt_bw + c->bw[i] > pad->bw_budget) { /* rule 2 */
		(*r2)++;
		return 0;
	}
	return 1;
}

/* pad_select_locked picks the next padding block: candidates in order, each
 * at its cursor; a kernel's version is chosen when its first block is
 * picked (the fitting version with the shortest kernel time) and kept
 * until the kernel completes. */
static int pad_select_locked(sk_pad *pad, int64_t rem_ns, int64_t rt_bw,
			     int32_t *ko, int32_t *vo, int64_t *blko)
{
	int64_t r1 = 0, r2 = 0;
	int pick = -1;
	for (int ci = 0; ci < pad->ncand && pick < 0; ci++) {
		sk_pad_cand *c = &pad->cand[ci];
		for (;;) {
			if (c->k >= c->nk)
				break;
			if (c->v >= 0) {
				if (c->next < c->grid) {
					int64_t i = (int64_t)c->k * c->nver + c->v;
					if (pad_fits(pad, c, i, rem_ns, rt_bw, &r1, &r2)) {
						*ko = c->k;
						*vo = c->v;
						*blko = c->next++;
						pick = ci;
					}
					break;
				}
				if (c->done < c->grid)
					break; /* its last blocks still run */
				c->k++;
				c->v = -1;
				c->next = c->done = c->grid = 0;
				continue;
			}
			sk_kernel *k0 = c->ver[(int64_t)c->k * c->nver];
			if (!k0 || k0->op == SK_OP_NOP) { /* nothing to run */
				c->k++;
				continue;
			}
			/* the version: padsel.h's choice, with the rules'
			 * verdicts (and rejection counts) from pad_fits */
			sk_padsel_ver vs[SK_PADSEL_MAX_VER];
			int nv = c->nver < SK_PADSEL_MAX_VER ? c->nver : SK_PADSEL_MAX_VER;
			for (int v = 0; v < nv; v++) {
				int64_t i = (int64_t)c->k * c->nver + v;
				vs[v] = (sk_padsel_ver){.kern_ns = (double)c->kern_ns[i],
							.blk_ns = (double)c->blk_ns[i],
							.grid = c->ver[i] ? 1 : 0, .occ = 1};
				vs[v].ok = c->ver[i] && pad_fits(pad, c, i, rem_ns, rt_bw, &r1, &r2);
			}
			int best = sk_padsel_version(vs, nv, (double)rem_ns, pad->rule1_pct);
			if (best >= 0) {
				c->v = best;
				c->grid = c->ver[(int64_t)c->k * c->nver + best]->grid;
				c->next = 1;
				c->done = 0;
				*ko = c->k;
				*vo = best;
				*blko = 0;
				pick = ci;
			}
			break;
		}
	}
	pad->rule1_rejects += r1;
	pad->rule2_rejects += r2;
	return pick;
}

int sk_pad_select(sk_pad *pad, int64_t rem_ns, int64_t rt_bw, int32_t *k,
		  int32_t *v, int64_t *blk)
{
	pad_lock(pad);
	int c = pad_select_locked(pad, rem_ns, rt_bw, k, v, blk);
	pad_unlock(pad);
	return c;
}

void sk_pad_complete(sk_pad *pad, int cand, int64_t ns)
{
	pad_lock(pad);
	sk_pad_cand *c = &pad->cand[cand];
	c->done++;
	c->blocks++;
	c->block_ns += ns;
	pad_unlock(pad);
}

int sk_pad_set(sk_pad *pad, int cand, const sk_pad_cand *src)
{
	if (cand < 0 || cand >= pad->cap)
		return SK_ERR;
	pad_lock(pad);
	pad->cand[cand] = *src;
	if (cand >= pad->ncand)
		pad->ncand = cand + 1;
	pad_unlock(pad);
	return SK_OK;
}

int sk_pad_get(sk_pad *pad, int cand, sk_pad_cand *dst)
{
	if (cand < 0 || cand >= pad->cap)
		return SK_ERR;
	pad_lock(pad);
	*dst = pad->cand[cand];
	pad_unlock(pad);
	return SK_OK;
}

void sk_pad_reset(sk_pad *pad)
{
	pad_lock(pad);
	pad->ncand = 0;
	pad_unlock(pad);
}

void sk_pad_start(sk_pool *p, sk_pad *pad)
{
	__atomic_store_n(&p->pad, pad, __ATOMIC_SEQ_CST);
	pool_kick(p);
}

void sk_pad_stop(sk_pool *p)
{
	__atomic_store_n(&p->pad, NULL, __ATOMIC_SEQ_CST);
	/* a unit inside a padding block finishes it (rule 1 bounds it); yield
	 * rather than spin, the unit may share this thread's core */
	for (int i = 0; __atomic_load_n(&p->pad_busy, __ATOMIC_SEQ_CST); i++) {
		if (i < 100)
			cpu_relax();
		else
			sched_yield();
	}
}

/* try_pad runs one padding block on unit u if the RT stream's running
 * kernel leaves u idle and a candidate block fits. */
static int try_pad(sk_pool *p, sk_unit *u)
{
	__atomic_add_fetch(&p->pad_busy, 1, __ATOMIC_SEQ_CST);
	sk_pad *pad = __atomic_load_n(&p->pad, __ATOMIC_SEQ_CST);
	int got = 0;
	if (!pad || !pad->rt)
		goto out;
	sk_stream *rt = pad->rt;
	uint64_t t = LD(&rt->ticket);
	uint32_t seq = (uint32_t)(t >> 32);
	if ((int32_t)(LD(&rt->tail) - seq) <= 0)
		goto out; /* no RT kernel */
	sk_slot *sl = &rt->ring[seq & rt->capmask];
	uint64_t mask = LDR(&sl->mask);
	int64_t st = LD(&sl->start_ns), est = LDR(&sl->est_ns), bw = LDR(&sl->bw);
	int64_t claimed = claimed_blocks(t, LDR(&sl->grid));
	if (st <= 0 || est <= 0 || (uint32_t)(LD(&rt->ticket) >> 32) != seq)
		goto out; /* the RT kernel has not started */
	if (((mask >> u->id) & 1) && claimed < LDR(&sl->grid))
		goto out; /* it still has blocks for u */
	int64_t t0 = now_ns();
	int64_t rem = st + est - t0;
	if (claimed >= LDR(&sl->grid)) {
		/* the kernel's tail: at most one block time remains after its
		 * last block was claimed */
		int64_t bn = LDR(&sl->blk_ns), last = LDR(&sl->last_ns);
		if (bn > 0)
			rem = SK_MIN(rem, last > 0 ? bn - (t0 - last) : bn);
	}
	int32_t k, v;
	int64_t blk;
	sk_kernel *kk = NULL;
	pad_lock(pad);
	int c = pad_select_locked(pad, rem, bw, &k, &v, &blk);
	if (c >= 0)
		kk = pad->cand[c].ver[(int64_t)k * pad->cand[c].nver + v];
	pad_unlock(pad);
	int64_t t1 = now_ns();
	__atomic_add_fetch(&pad->sel_calls, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&pad->sel_ns, t1 - t0, __ATOMIC_RELAXED);
	if (t1 - t0 > 2000)
		__atomic_add_fetch(&pad->sel_over_2us, 1, __ATOMIC_RELAXED);
	if (t1 - t0 > LDR(&pad->sel_max_ns))
		STR(&pad->sel_max_ns, t1 - t0);
	if (c < 0)
		goto out;
	u->ctx.flag = &p->pad_noflag;
	sk_table[kk->op].block(kk, blk, &u->ctx);
	sk_pad_complete(pad, c, now_ns() - t1);
	/* the candidate's next kernel may now be free for sleeping units */
	pool_kick(p);
	got = 1;
out:
	__atomic_sub_fetch(&p->pad_busy, 1, __ATOMIC_SEQ_CST);
	return got;
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
