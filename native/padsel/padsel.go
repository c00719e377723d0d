// Package padsel is the Go face of the padding selector (padsel.h): the
// one implementation of REEF's padding rules and version choice that the
// cpu runtime's units (C) and the cuda device's padded launches (Go, one
// call per launch through this package) both use.
package padsel

/*
#cgo CFLAGS: -O2 -std=gnu11 -Wall -Wextra
#include <stddef.h>
#include "padsel.h"

enum {
	padsel_off_grid = offsetof(sk_padsel_ver, grid),
	padsel_off_nver = offsetof(sk_padsel_job, nver)
};

static int padsel_launch(int64_t rt_grid, int64_t rt_occ, double rem_ns, int sms,
			 const sk_padsel_job *jobs, int njobs, int max_picks,
			 sk_padsel_pick *out)
{
	return sk_padsel_launch(rt_grid, rt_occ, rem_ns, sms, jobs, njobs, max_picks, out);
}

static int padsel_version(const sk_padsel_ver *v, int n, double rem_ns, int64_t pct)
{
	return sk_padsel_version(v, n, rem_ns, pct);
}
*/
import "C"

import "unsafe"

// MaxBE is the most best-effort kernels one padded launch carries, and
// MaxVersions the versions of a kernel the selector considers.
const (
	MaxBE       = int(C.SK_PADSEL_MAX_BE)
	MaxVersions = int(C.SK_PADSEL_MAX_VER)
)

// Version is a kernel version's profile as the selector reads it
// (sk_padsel_ver).
type Version struct {
	// KernelNs and BlockNs are its profiled kernel and block time; a
	// version without a block time is never picked.
	KernelNs, BlockNs float64
	// Grid is the blocks it has left, Occupancy its blocks per unit at
	// once (on a GPU: per SM in the padded launch).
	Grid, Occupancy int32
	// OK is the device's Rule 2 verdict: on a GPU (Launch), that the
	// version has an occupancy in the padded launch.
	OK int32
	_  int32
}

// Job is a suspended best-effort job's next kernel: its versions, one
// when the kernel has started (sk_padsel_job).
type Job struct {
	Versions [MaxVersions]Version
	N        int32
	_        int32
}

// Pick is a chosen job of a padded launch: Job's version Version on SMs
// [Lo, Hi), at most Blocks of its blocks: those the SMs finish within the
// RT kernel's remaining time (sk_padsel_pick).
type Pick struct {
	Job, Version, Lo, Hi int32
	Blocks               int32
	_                    int32
}

// the Go types are the C types' layout: passed to C as they are
var (
	_ [unsafe.Sizeof(Version{}) - C.sizeof_sk_padsel_ver]byte
	_ [C.sizeof_sk_padsel_ver - unsafe.Sizeof(Version{})]byte
	_ [unsafe.Sizeof(Job{}) - C.sizeof_sk_padsel_job]byte
	_ [C.sizeof_sk_padsel_job - unsafe.Sizeof(Job{})]byte
	_ [unsafe.Sizeof(Pick{}) - C.sizeof_sk_padsel_pick]byte
	_ [C.sizeof_sk_padsel_pick - unsafe.Sizeof(Pick{})]byte
	_ [unsafe.Offsetof(Version{}.Grid) - C.padsel_off_grid]byte
	_ [C.padsel_off_grid - unsafe.Offsetof(Version{}.Grid)]byte
	_ [unsafe.Offsetof(Job{}.N) - C.padsel_off_nver]byte
	_ [C.padsel_off_nver - unsafe.Offsetof(Job{}.N)]byte
)

// RT is the real-time kernel about to launch.
type RT struct {
	// Grid is its block count, Occupancy its blocks per unit in the
	// padded launch.
	Grid, Occupancy int
	// RemainingNs is its profiled remaining time (the whole kernel time
	// for a kernel about to start).
	RemainingNs float64
}

// RTUnits is the units the RT kernel occupies (sk_padsel_rt_units):
// ceil(grid / occupancy), at most units (0 for an empty kernel; units when
// the occupancy is unknown).
func RTUnits(rt RT, units int) int {
	return int(C.sk_padsel_rt_units(C.int64_t(rt.Grid), C.int64_t(rt.Occupancy), C.int(units)))
}

// Launch is a padded GPU launch's selection (sk_padsel_launch): each
// job's version (Rule 1; Rule 2 is the SMs), then jobs in order until
// MaxBE are picked or the SMs beyond the RT kernel's run out. It appends
// the picks to out[:0] and returns it; one cgo call, no allocation when
// out has room for MaxBE.
func Launch(rt RT, sms int, jobs []Job, out []Pick) []Pick {
	out = out[:0]
	if len(jobs) == 0 {
		return out
	}
	if cap(out) < MaxBE {
		out = make([]Pick, 0, MaxBE)
	}
	out = out[:MaxBE]
	n := C.padsel_launch(C.int64_t(rt.Grid), C.int64_t(rt.Occupancy), C.double(rt.RemainingNs), C.int(sms),
		(*C.sk_padsel_job)(unsafe.Pointer(&jobs[0])), C.int(len(jobs)), C.int(MaxBE),
		(*C.sk_padsel_pick)(unsafe.Pointer(&out[0])))
	return out[:int(n)]
}

// Choose is the version choice (sk_padsel_version): of vers with blocks
// and OK that pass Rule 1 beside an RT kernel with remNs left (margin pct
// percent, <= 0: 100), the one with the shortest kernel time; -1 when
// none qualifies.
func Choose(vers []Version, remNs float64, pct int) int {
	if len(vers) == 0 {
		return -1
	}
	return int(C.padsel_version((*C.sk_padsel_ver)(unsafe.Pointer(&vers[0])), C.int(len(vers)), C.double(remNs), C.int64_t(pct)))
}
