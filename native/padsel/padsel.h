/*
 * padsel.h: the padding selector of every device (REEF §5.2-5.3), once.
 *
 * Dynamic kernel padding runs blocks of suspended best-effort (BE) kernels
 * on the units a real-time (RT) kernel leaves idle. Both devices decide it
 * with the functions below:
 *
 *   - the cpu runtime (native/cpu/runtime.c), on a unit thread, each time
 *     a unit the RT kernel leaves idle looks for a block to run: Rule 1 and
 *     the version choice, with the cpu's Rule 2 (a memory-bandwidth
 *     budget) as the caller's verdict per version;
 *   - the cuda device (libml/cuda, through native/padsel's Go package), on
 *     the host before each padded launch: sk_padsel_launch, whose Rule 2
 *     is the SM partition.
 *
 * Rule 1: a BE kernel qualifies only if its profiled block time is below
 * the RT kernel's remaining time (times pct / 100: the cpu's margin; 100
 * is REEF's rule). A padded block then outlives the RT kernel by at most
 * one block time.
 *
 * Rule 2 keeps the RT kernel's resources. On the cpu: the RT kernel's
 * memory bandwidth plus one padding block's within a budget. On a GPU: BE
 * blocks only on SMs the RT kernel cannot occupy; the RT kernel needs
 * ceil(grid / occupancy) SMs, [0, that), BE kernels get disjoint ranges of
 * the rest, and when the RT kernel needs every SM there is no padding.
 *
 * Versions (REEF §5.3): a BE kernel about to start runs in the version
 * with the shortest kernel time of those that satisfy both rules; a
 * started kernel is finished in its version (the caller passes only that
 * one).
 *
 * Header-only (static inline): no allocation, no lock, no system call;
 * callers keep their state (cursors, candidates) themselves.
 */
#ifndef SLUICE_PADSEL_H
#define SLUICE_PADSEL_H

#include <stdint.h>

/* the most BE kernels one padded GPU launch carries, and versions per
 * kernel the selector considers */
#define SK_PADSEL_MAX_BE 4
#define SK_PADSEL_MAX_VER 4

/* A kernel version's profile, as the selector reads it. */
typedef struct sk_padsel_ver {
	double kern_ns; /* profiled kernel time */
	double blk_ns;  /* profiled block time (<= 0: unknown, never padded) */
	int32_t grid;   /* blocks left to run */
	int32_t occ;    /* blocks per unit at once (GPU: per SM, in sg_pad) */
	int32_t ok;     /* the device's Rule 2 verdict for this version (a
			 * GPU's: it has an occupancy in the padded launch) */
	int32_t _pad;
} sk_padsel_ver;

/* A suspended BE job's next kernel: its versions (one when started). */
typedef struct sk_padsel_job {
	sk_padsel_ver ver[SK_PADSEL_MAX_VER];
	int32_t nver;
	int32_t _pad;
} sk_padsel_job;

/* A pick of a padded GPU launch: job's version ver on SMs [lo, hi), at
 * most blocks of its blocks (those the SMs finish within the RT kernel's
 * remaining time). */
typedef struct sk_padsel_pick {
	int32_t job, ver, lo, hi;
	int32_t blocks, _pad;
} sk_padsel_pick;

/* sk_padsel_rule1 is Rule 1: a block of blk_ns beside an RT kernel with
 * rem_ns left, with margin pct percent (<= 0: 100). */
static inline int sk_padsel_rule1(double blk_ns, double rem_ns, int64_t pct)
{
	if (pct <= 0)
		pct = 100;
	return blk_ns > 0 && blk_ns * 100.0 < rem_ns * (double)pct;
}

/* sk_padsel_version chooses the version of a kernel about to start: among
 * n versions, of those with blocks and ok (the device's Rule 2) that pass
 * Rule 1, the one with the shortest kernel time (of equal times the
 * first); -1 when none qualifies. */
static inline int sk_padsel_version(const sk_padsel_ver *v, int n, double rem_ns,
				    int64_t pct)
{
	int best = -1;
	for (int i = 0; i < n; i++) {
		if (!v[i].ok || v[i].grid <= 0 || !sk_padsel_rule1(v[i].blk_ns, rem_ns, pct))
			continue;
		if (best < 0 || v[i].kern_ns < v[best].kern_ns)
			best = i;
	}
	return best;
}

/* sk_padsel_rt_units is the units an RT kernel of grid blocks at occ
 * blocks per unit occupies: ceil(grid / occ), at most units (0 for an
 * empty kernel; units when the occupancy is unknown). */
static inline int sk_padsel_rt_units(int64_t grid, int64_t occ, int units)
{
	if (grid <= 0)
		return 0;
	if (occ <= 0)
		return units;
	int64_t n = (grid + occ - 1) / occ;
	return n < units ? (int)n : units;
}

/* sk_padsel_launch is a padded GPU launch's selection: an RT kernel of
 * rt_grid blocks at rt_occ per SM with rem_ns left, on sms SMs, and njobs
 * suspended jobs' next kernels in the caller's order (its fairness).
 * Each job's version is chosen (Rule 1; Rule 2 is the SMs, the same for
 * every version: a padded launch's occupancy is sg_pad's, which the
 * caller put in occ, with ok set where it is above 0), then jobs are taken in order until max_picks are
 * picked or the free SMs run out. A picked kernel gets as many SMs as it
 * needs to run all its blocks within rem_ns (its blocks run back to back
 * on an SM, occ at a time), at least one; SMs still free after the last
 * pick go to it as well (they would idle). A pick's blocks are what its
 * SMs run within rem_ns, floor(rem_ns / blk_ns) rounds of occ per SM (at
 * least one round: Rule 1), at most its grid: a launch whose BE blocks
 * kept taking work until the RT kernel ended would outlive it by up to a
 * block time on every SM, which for short RT kernels (a block time near
 * the RT kernel's) nearly doubled them. It writes the picks to out (room
 * for max_picks) and returns their count. */
static inline int sk_padsel_launch(int64_t rt_grid, int64_t rt_occ, double rem_ns, int sms,
				   const sk_padsel_job *jobs, int njobs, int max_picks,
				   sk_padsel_pick *out)
{
	int next = sk_padsel_rt_units(rt_grid, rt_occ, sms);
	if (next >= sms || !(rem_ns > 0) || max_picks <= 0)
		return 0;
	int n = 0;
	for (int j = 0; j < njobs; j++) {
		const sk_padsel_ver *vs = jobs[j].ver;
		int nv = jobs[j].nver < SK_PADSEL_MAX_VER ? jobs[j].nver : SK_PADSEL_MAX_VER;
		int v = sk_padsel_version(vs, nv, rem_ns, 100);
		if (v < 0 || vs[v].occ <= 0)
			continue;
		/* blocks one SM runs while the RT kernel runs */
		int64_t rounds = (int64_t)(rem_ns / vs[v].blk_ns);
		int64_t per = (int64_t)vs[v].occ * (rounds > 1 ? rounds : 1);
		int64_t need = ((int64_t)vs[v].grid + per - 1) / per;
		int64_t k = need < sms - next ? need : sms - next;
		out[n].job = j;
		out[n].ver = v;
		out[n].lo = next;
		out[n].hi = next + (int)k;
		/* per SM, as blocks below once the SMs are final */
		out[n].blocks = (int32_t)(per < INT32_MAX ? per : INT32_MAX);
		out[n]._pad = 0;
		next += (int)k;
		n++;
		if (next >= sms || n == max_picks)
			break;
	}
	if (n > 0)
		out[n - 1].hi = sms;
	for (int i = 0; i < n; i++) {
		int64_t b = (int64_t)out[i].blocks * (out[i].hi - out[i].lo);
		int64_t g = jobs[out[i].job].ver[out[i].ver].grid;
		out[i].blocks = (int32_t)(b < g ? b : g);
	}
	return n;
}

#endif
