//go:build sluice_nopreempt

package cpu

// Builds tagged sluice_nopreempt compile the preemption prologue and the
// in-block checks out of every kernel (SK_CHECKS=0). They exist only to
// measure what the checks cost (tools/enginebench); preemption still evicts
// queued kernels at kernel boundaries but cannot stop a running one.

/*
#cgo CFLAGS: -DSK_CHECKS=0
*/
import "C"
