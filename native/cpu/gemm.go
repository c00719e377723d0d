package cpu

// #include "sluice_cpu.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// The GEMM core (sgemm.c) has one micro-kernel per instruction set and uses
// the best one the CPU has. Every one computes each output element as the
// same chain of fused multiply-adds over k in order, so they give the same
// bits: the choice is a matter of speed only. SetGemmISA exists for tests
// and benchmarks that compare them.

// GemmISAs lists the instruction sets the GEMM core can use on this CPU,
// slowest first.
func GemmISAs() []string {
	var out []string
	for i := C.int(0); i < C.SK_ISA_COUNT; i++ {
		if C.sk_gemm_isa_supported(i) != 0 {
			out = append(out, C.GoString(C.sk_gemm_isa_name(i)))
		}
	}
	return out
}

// GemmISA names the instruction set the GEMM core uses now.
func GemmISA() string { return C.GoString(C.sk_gemm_isa_name(C.sk_gemm_isa())) }

// SetGemmISA makes the GEMM core use the named instruction set ("" picks
// the best the CPU has). It is process-wide; call it only while no kernel
// runs.
func SetGemmISA(name string) error {
	if name == "" {
		C.sk_gemm_set_isa(-1)
		return nil
	}
	for i := C.int(0); i < C.SK_ISA_COUNT; i++ {
		if C.GoString(C.sk_gemm_isa_name(i)) == name {
			if C.sk_gemm_set_isa(i) != C.SK_OK {
				return fmt.Errorf("gemm: this CPU lacks %s", name)
			}
			return nil
		}
	}
	return fmt.Errorf("gemm: unknown instruction set %q (have %v)", name, GemmISAs())
}

// DepthwiseVectorWidth is the widest input row the float 3x3 depthwise
// kernel (one output channel per channel, no fused producer) computes 16
// channels a vector, one lane a channel, with the instruction set the
// GEMM core uses now (AVX-512); 0 where it never does. On such small
// planes that kernel beats the pointwise-depthwise fusion, so the engine
// keeps the pair apart there (engine.Options.DepthwiseVectorWidth).
func DepthwiseVectorWidth() int { return int(C.sk_dw_vector_width()) }

// Gemm computes c (m x n, leading dimension ldc) = a (m x k) * b (k x n) on
// the calling thread with the GEMM core every kernel uses. a(i, p) is
// a[i*lda+p], or a[p*lda+i] when ta; b(p, j) is b[p*ldb+j], or b[j*ldb+p]
// when tb. Each element is one fused multiply-add chain over p = 0..k-1
// from zero, or, when acc, from the value c holds.
func Gemm(ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, acc bool) error {
	if m <= 0 || n <= 0 || k < 0 {
		return fmt.Errorf("gemm: bad shape %dx%dx%d", m, n, k)
	}
	need := func(ta bool, rows, cols, ld int) int { // elements read of a matrix
		if ta {
			rows, cols = cols, rows
		}
		if rows == 0 || cols == 0 {
			return 0
		}
		return (rows-1)*ld + cols
	}
	switch {
	case (ta && lda < m) || (!ta && lda < k) || (tb && ldb < k) || (!tb && ldb < n) || ldc < n:
		return fmt.Errorf("gemm: leading dimension too small (lda %d ldb %d ldc %d for %dx%dx%d)", lda, ldb, ldc, m, n, k)
	case len(a) < need(ta, m, k, lda) || len(b) < need(tb, k, n, ldb) || len(c) < need(false, m, n, ldc):
		return fmt.Errorf("gemm: a slice is shorter than its shape")
	}
	var pa, pb *C.float
	if k > 0 {
		pa, pb = (*C.float)(unsafe.Pointer(&a[0])), (*C.float)(unsafe.Pointer(&b[0]))
	}
	C.sk_gemm(cbool(ta), cbool(tb), C.int64_t(m), C.int64_t(n), C.int64_t(k), pa, C.int64_t(lda),
		pb, C.int64_t(ldb), (*C.float)(unsafe.Pointer(&c[0])), C.int64_t(ldc), cbool(acc))
	return nil
}

// GemmPanels is Gemm (the same bits) with b stored in panels of GemmPanel
// columns ldp floats apart (the engine lays constant weights out so at
// load): b(p, j) is
// bp[(j/GemmPanel)*ldp + p*GemmPanel + j%GemmPanel]. bp starts at the
// first column of a panel, at row 0 of this call's reduction.
func GemmPanels(ta bool, m, n, k int, a []float32, lda int, bp []float32, ldp int, c []float32, ldc int, acc bool) error {
	if m <= 0 || n <= 0 || k < 0 {
		return fmt.Errorf("gemm panels: bad shape %dx%dx%d", m, n, k)
	}
	np := (n + GemmPanel - 1) / GemmPanel
	needA := (m-1)*lda + k
	if ta {
		needA = (k-1)*lda + m
	}
	switch {
	case (ta && lda < m) || (!ta && lda < k) || ldp < k*GemmPanel || ldc < n:
		return fmt.Errorf("gemm panels: leading dimension too small (lda %d ldp %d ldc %d for %dx%dx%d)", lda, ldp, ldc, m, n, k)
	case k > 0 && (len(a) < needA || len(bp) < (np-1)*ldp+k*GemmPanel) || len(c) < (m-1)*ldc+n:
		return fmt.Errorf("gemm panels: a slice is shorter than its shape")
	}
	var pa, pb *C.float
	if k > 0 {
		pa, pb = (*C.float)(unsafe.Pointer(&a[0])), (*C.float)(unsafe.Pointer(&bp[0]))
	}
	C.sk_gemm_panels(cbool(ta), C.int64_t(m), C.int64_t(n), C.int64_t(k), pa, C.int64_t(lda),
		pb, C.int64_t(ldp), (*C.float)(unsafe.Pointer(&c[0])), C.int64_t(ldc), cbool(acc))
	return nil
}

// GemmAPanels is Gemm (the same bits, no transpositions) with a (m x k)
// stored transposed in panels (its k x M transpose in GemmPanels' layout, M
// its full row count, ldpa = k_full * GemmPanel between panels), this call's
// rows starting at row r0: a(i, p) is
// ap[((r0+i)/GemmPanel)*ldpa + p*GemmPanel + (r0+i)%GemmPanel]. ap is at
// row 0 of this call's reduction.
func GemmAPanels(m, n, k int, ap []float32, ldpa, r0 int, b []float32, ldb int, c []float32, ldc int, acc bool) error {
	if m <= 0 || n <= 0 || k < 0 || r0 < 0 {
		return fmt.Errorf("gemm apanels: bad shape %dx%dx%d (rows from %d)", m, n, k, r0)
	}
	last := (r0 + m - 1) / GemmPanel
	switch {
	case ldpa < k*GemmPanel || ldb < n || ldc < n:
		return fmt.Errorf("gemm apanels: leading dimension too small (ldpa %d ldb %d ldc %d for %dx%dx%d)", ldpa, ldb, ldc, m, n, k)
	case k > 0 && (len(ap) < last*ldpa+k*GemmPanel || len(b) < (k-1)*ldb+n) || len(c) < (m-1)*ldc+n:
		return fmt.Errorf("gemm apanels: a slice is shorter than its shape")
	}
	var pa, pb *C.float
	if k > 0 {
		pa, pb = (*C.float)(unsafe.Pointer(&ap[0])), (*C.float)(unsafe.Pointer(&b[0]))
	}
	C.sk_gemm_apanels(C.int64_t(m), C.int64_t(n), C.int64_t(k), pa, C.int64_t(ldpa), C.int64_t(r0),
		pb, C.int64_t(ldb), (*C.float)(unsafe.Pointer(&c[0])), C.int64_t(ldc), cbool(acc))
	return nil
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
