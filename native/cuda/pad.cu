/*
 * pad.cu: dynamic kernel padding (REEF §5, Figure 12; NVIDIA: §5.5).
 *
 * sg_pad runs one real-time (RT) kernel and up to SG_PAD_MAX_BE
 * best-effort (BE) kernels in one launch. Blocks pick their work by the
 * SM they landed on (%smid): blocks on SMs [0, rt_sms) run RT blocks,
 * blocks on a BE kernel's SM range [sm_lo, sm_hi) run that kernel's
 * blocks. PTX does not promise contiguous %smid values: the ranges are
 * in %smid values, which the host can learn with sg_clock; a block on an
 * SM outside every range only helps the RT kernel. Work is claimed through counters in the sg_pad control block
 * (device memory, counters zeroed by the host before each launch), so
 * every RT block runs exactly once whatever the placement:
 *   - RT-SM blocks claim RT blocks until there are none left;
 *   - BE-SM blocks claim BE blocks while the RT kernel is unfinished (a
 *     BE block never outlives the RT kernel by more than one BE block:
 *     REEF's Rule 1 bounds that by the selector), then help with RT
 *     blocks left unclaimed, then exit.
 * After the launch, every block of kernel k (0 = RT, 1+i = BE i) below
 * min(lost[k], next[k], grid) has run: the host relaunches the rest with
 * t[SG_T_BASE] advanced that far. A block whose stream was preempted
 * while it ran may have stopped early: it lowers lost[k] instead of
 * counting in done[k] (blocks finish out of order, so done[k] alone
 * cannot say which ones ran).
 *
 * The candidate kernels' bodies are the family files' bodies, inlined
 * behind one switch: REEF's "global function pointers" without a jump.
 * All kernels share SG_THREADS threads per block. Each kernel's blocks
 * check its own stream's flag: a preempted BE stream stops taking blocks
 * and its running blocks exit at their next poll, while RT blocks go on;
 * when the RT stream is preempted, no block takes any more work.
 *
 * Parameters: the usual three (RT stream state, RT execution index, RT
 * arguments) and 3: sg_pad *pad.
 */
#define SG_NO_ENTRIES
#include "eltwise.cu"
#include "gemm.cu"
#include "conv.cu"
#include "pool.cu"
#include "softmax.cu"
#include "norm.cu"
#include "copy.cu"
#include "resize.cu"
#include "quant.cu"
#include "gridsample.cu"
#include "topk.cu"
#include "roialign.cu"
#include "det.cu"
#undef SG_NO_ENTRIES

#define SG_PAD_MAX_BE 4

/* Operation codes: enum sk_op in native/cpu/sluice_cpu.h. */
enum {
	SG_OP_NOP = 0, SG_OP_GEMM = 1, SG_OP_CONV = 2, SG_OP_IM2COL = 3,
	SG_OP_DWCONV = 4, SG_OP_COL2IM = 5, SG_OP_POOL = 6, SG_OP_GPOOL = 7,
	SG_OP_UNARY = 8, SG_OP_BINARY = 9, SG_OP_CHAFFINE = 10,
	SG_OP_SOFTMAX = 11, SG_OP_LAYERNORM = 12, SG_OP_REDUCE = 13,
	SG_OP_COPY = 14, SG_OP_RESIZE = 15, SG_OP_GATHER = 16,
	SG_OP_QUANT = 17, SG_OP_QGEMM = 18, SG_OP_GRIDSAMPLE = 19, SG_OP_TOPK = 20,
	SG_OP_ROIALIGN = 21, SG_OP_DET = 22
};

/* A BE kernel of a padded launch (464 bytes). */
typedef struct sg_pad_kern {
	sg_args a;     /*   0 */
	sg_state *st;  /* 432 its stream */
	sg_i64 idx;    /* 440 its execution index */
	int op;        /* 448 */
	sg_u32 grid;   /* 452 blocks to run: t[SG_T_BASE] .. + grid - 1 */
	sg_u32 sm_lo;  /* 456 SMs [sm_lo, sm_hi) run it */
	sg_u32 sm_hi;  /* 460 */
} sg_pad_kern;

/* The control block of a padded launch (80 + 464 * SG_PAD_MAX_BE bytes).
 * The host sets next and done to 0 and lost to ~0 before each launch. */
typedef struct sg_pad_ctl {
	sg_u32 next[1 + SG_PAD_MAX_BE]; /*  0 claim counters: RT, BE 0.. */
	sg_u32 done[1 + SG_PAD_MAX_BE]; /* 20 blocks finished */
	sg_u32 lost[1 + SG_PAD_MAX_BE]; /* 40 lowest block cut by preemption */
	sg_u32 nbe;                     /* 60 BE kernels */
	sg_u32 rt_sms;                  /* 64 SMs [0, rt_sms) run RT blocks */
	int rt_op;                      /* 68 */
	sg_u32 rt_grid;                 /* 72 RT blocks: t[SG_T_BASE] .. */
	sg_u32 _pad;                    /* 76 */
	sg_pad_kern be[SG_PAD_MAX_BE];  /* 80 */
} sg_pad_ctl;

SG_DEV void sg_run_op(int op, const sg_args &a, sg_i64 blk, sg_state *st)
{
	switch (op) {
	case SG_OP_GEMM:
		sg_body_gemm(a, blk, st);
		break;
	case SG_OP_CONV:
		sg_body_conv(a, blk, st);
		break;
	case SG_OP_IM2COL:
		sg_body_im2col(a, blk, st);
		break;
	case SG_OP_DWCONV:
		sg_body_dwconv(a, blk, st);
		break;
	case SG_OP_COL2IM:
		sg_body_col2im(a, blk, st);
		break;
	case SG_OP_POOL:
		sg_body_pool(a, blk, st);
		break;
	case SG_OP_GPOOL:
		sg_body_gpool(a, blk, st);
		break;
	case SG_OP_UNARY:
		sg_body_unary(a, blk, st);
		break;
	case SG_OP_BINARY:
		sg_body_binary(a, blk, st);
		break;
	case SG_OP_CHAFFINE:
		sg_body_chaffine(a, blk, st);
		break;
	case SG_OP_SOFTMAX:
		sg_body_softmax(a, blk, st);
		break;
	case SG_OP_LAYERNORM:
		sg_body_layernorm(a, blk, st);
		break;
	case SG_OP_REDUCE:
		sg_body_reduce(a, blk, st);
		break;
	case SG_OP_COPY:
		sg_body_copy(a, blk, st);
		break;
	case SG_OP_RESIZE:
		sg_body_resize(a, blk, st);
		break;
	case SG_OP_GATHER:
		sg_body_gather(a, blk, st);
		break;
	case SG_OP_QUANT:
		sg_body_quant(a, blk, st);
		break;
	case SG_OP_QGEMM:
		sg_body_qgemm(a, blk, st);
		break;
	case SG_OP_GRIDSAMPLE:
		sg_body_gridsample(a, blk, st);
		break;
	case SG_OP_TOPK:
		sg_body_topk(a, blk, st);
		break;
	case SG_OP_ROIALIGN:
		sg_body_roialign(a, blk, st);
		break;
	case SG_OP_DET:
		sg_body_det(a, blk, st);
		break;
	default:
		break;
	}
}

/* Work items: a BE kernel index >= 0, SG_PAD_RT, or SG_PAD_NONE. */
#define SG_PAD_RT (-1)
#define SG_PAD_NONE (-2)

SG_KERNEL void sg_pad(sg_state *st, sg_i64 idx, const sg_args a, sg_pad_ctl *pad)
{
	SG_SHARED sg_args sa;
	SG_SHARED int s_w;
	SG_SHARED sg_u32 s_v;
	sg_u32 t = sg_tid();
	if (sg_enter(st, idx, sg_bid()))
		return;
	/* thread 0 decides; its role is its own */
	int role = SG_PAD_NONE;
	sg_u32 rt_grid = pad->rt_grid;
	if (t == 0) {
		sg_u32 sm = sg_smid();
		if (sm < pad->rt_sms) {
			role = SG_PAD_RT;
		} else {
			for (sg_u32 i = 0; i < pad->nbe && i < SG_PAD_MAX_BE; i++)
				if (sm >= pad->be[i].sm_lo && sm < pad->be[i].sm_hi) {
					role = (int)i;
					break;
				}
		}
	}
	int loaded = SG_PAD_NONE;
	for (;;) {
		if (t == 0) {
			int w = SG_PAD_NONE;
			sg_u32 v = 0;
			if (st->flag) {
				/* the RT stream is preempted: the launch dies */
				role = SG_PAD_NONE;
			} else if (role == SG_PAD_RT) {
				v = sg_atomic_add32(&pad->next[0], 1);
				if (v < rt_grid)
					w = SG_PAD_RT;
			} else {
				if (role >= 0) {
					const sg_pad_kern *k = &pad->be[role];
					if (*(volatile sg_u32 *)&pad->done[0] < rt_grid &&
					    !k->st->flag) {
						v = sg_atomic_add32(&pad->next[1 + role], 1);
						if (v < k->grid)
							w = role;
					}
					if (w == SG_PAD_NONE)
						role = SG_PAD_NONE; /* no more BE work */
				}
				if (w == SG_PAD_NONE &&
				    *(volatile sg_u32 *)&pad->next[0] < rt_grid) {
					v = sg_atomic_add32(&pad->next[0], 1);
					if (v < rt_grid)
						w = SG_PAD_RT;
				}
			}
			s_w = w;
			s_v = v;
		}
		sg_sync();
		int w = s_w;
		sg_u32 v = s_v;
		if (w == SG_PAD_NONE)
			break;
		if (w != loaded) {
			if (w == SG_PAD_RT) {
				if (t == 0)
					sa = a;
			} else {
				const sg_u64 *src = (const sg_u64 *)&pad->be[w].a;
				if (t < sizeof(sg_args) / 8)
					((sg_u64 *)&sa)[t] = src[t];
			}
			loaded = w;
		}
		sg_sync();
		sg_state *ks = st;
		int op = pad->rt_op;
		if (w >= 0) {
			ks = pad->be[w].st;
			op = pad->be[w].op;
		}
		sg_i64 vb = sa.t[SG_T_BASE] + v;
		if (w >= 0 && t == 0) {
			/* the BE block's prologue: thread 0 saw its flag clear */
			ks->exec = pad->be[w].idx;
			if (ks->ring)
				sg_ring_post(ks, 0, pad->be[w].idx, vb);
		}
		sg_run_op(op, sa, vb, ks);
		sg_sync();
		if (t == 0) {
			sg_fence();
			if (ks->flag)
				sg_atomic_min32(&pad->lost[w + 1], v);
			else
				sg_atomic_add32(&pad->done[w + 1], 1);
		}
	}
	sg_leave(st, idx, sg_bid());
}
SG_EMU_REGISTER4(sg_pad, sg_pad_ctl)
