package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// gemmCase is one GEMM problem with operand layouts.
type gemmCase struct {
	m, n, k int
	ta, tb  bool
}

// gemmOperands fills a and b for c with values from a fixed seed and returns
// them with their leading dimensions (one spare column, so strides are
// exercised).
func gemmOperands(c gemmCase, seed int64) (a []float32, lda int, b []float32, ldb int) {
	r := rand.New(rand.NewSource(seed))
	ar, ac := c.m, c.k
	if c.ta {
		ar, ac = c.k, c.m
	}
	br, bc := c.k, c.n
	if c.tb {
		br, bc = c.n, c.k
	}
	lda, ldb = ac+1, bc+1
	a = make([]float32, ar*lda)
	b = make([]float32, br*ldb)
	for i := range a {
		a[i] = r.Float32() - 0.5
	}
	for i := range b {
		b[i] = r.Float32() - 0.5
	}
	return a, lda, b, ldb
}

// gemmTiled computes c in tiles of mt x nt, each over K in chunks of kt
// (accumulating after the first), the way kernel versions and preemptible
// copies split a block.
func gemmTiled(t *testing.T, gc gemmCase, a []float32, lda int, b []float32, ldb int, mt, nt, kt int) []float32 {
	t.Helper()
	return tiledCall(t, gc, mt, nt, kt, func(m0, n0, k0, ml, nl, kl int, c []float32) error {
		ao := m0*lda + k0
		if gc.ta {
			ao = k0*lda + m0
		}
		bo := k0*ldb + n0
		if gc.tb {
			bo = n0*ldb + k0
		}
		return Gemm(gc.ta, gc.tb, ml, nl, kl, a[ao:], lda, b[bo:], ldb, c, gc.n, k0 > 0)
	})
}

// tiledCall computes gc's C (gc.n columns a row) in tiles of mt x nt, each
// over K in chunks of kt, by call (given C at the tile's first element;
// it accumulates after the first chunk), into a C of NaNs: every element
// must be written.
func tiledCall(t *testing.T, gc gemmCase, mt, nt, kt int, call func(m0, n0, k0, ml, nl, kl int, c []float32) error) []float32 {
	t.Helper()
	c := make([]float32, gc.m*gc.n)
	for i := range c {
		c[i] = float32(math.NaN())
	}
	for m0 := 0; m0 < gc.m; m0 += mt {
		for n0 := 0; n0 < gc.n; n0 += nt {
			for k0 := 0; k0 < gc.k; k0 += kt {
				ml, nl, kl := min(mt, gc.m-m0), min(nt, gc.n-n0), min(kt, gc.k-k0)
				if err := call(m0, n0, k0, ml, nl, kl, c[m0*gc.n+n0:]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return c
}

var gemmCases = []gemmCase{
	{1, 1, 1, false, false}, {1, 1000, 512, false, false}, {3, 17, 5, true, false},
	{7, 33, 300, false, true}, {12, 32, 256, false, false}, {13, 31, 257, true, true},
	{25, 65, 600, false, false}, {64, 49, 576, false, false}, {97, 100, 27, false, true},
	{130, 20, 1100, true, false},
}

// TestGemmBitsIndependentOfTilingAndISA checks the GEMM core's contract:
// whatever the tiling of C, the split of K and the instruction set, every
// element has the same bits as one call on the portable implementation.
func TestGemmBitsIndependentOfTilingAndISA(t *testing.T) {
	defer SetGemmISA("")
	isas := GemmISAs()
	t.Logf("instruction sets: %v (default %s)", isas, GemmISA())
	r := rand.New(rand.NewSource(11))
	for ci, gc := range gemmCases {
		a, lda, b, ldb := gemmOperands(gc, int64(ci))
		if err := SetGemmISA("generic"); err != nil {
			t.Fatal(err)
		}
		want := gemmTiled(t, gc, a, lda, b, ldb, gc.m, gc.n, gc.k)
		// the portable result against a float64 reference: the core
		// computes the product at all
		for i := 0; i < gc.m; i++ {
			for j := 0; j < gc.n; j++ {
				var s, mag float64
				for p := 0; p < gc.k; p++ {
					ai, bi := i*lda+p, p*ldb+j
					if gc.ta {
						ai = p*lda + i
					}
					if gc.tb {
						bi = j*ldb + p
					}
					av, bv := a[ai], b[bi]
					s += float64(av) * float64(bv)
					mag += math.Abs(float64(av) * float64(bv))
				}
				if d := math.Abs(float64(want[i*gc.n+j]) - s); d > 1e-6*(mag+1) {
					t.Fatalf("case %+v: C[%d][%d] = %v, float64 reference %v", gc, i, j, want[i*gc.n+j], s)
				}
			}
		}
		for _, isa := range isas {
			if err := SetGemmISA(isa); err != nil {
				t.Fatal(err)
			}
			for trial := 0; trial < 4; trial++ {
				mt, nt, kt := 1+r.Intn(gc.m), 1+r.Intn(gc.n), 1+r.Intn(gc.k)
				if trial == 0 {
					mt, nt, kt = gc.m, gc.n, gc.k
				}
				got := gemmTiled(t, gc, a, lda, b, ldb, mt, nt, kt)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("case %+v, %s, tiles %dx%d, K in %d: C[%d] = %v, want %v (bits %08x vs %08x)",
							gc, isa, mt, nt, kt, i, got[i], want[i], math.Float32bits(got[i]), math.Float32bits(want[i]))
					}
				}
			}
		}
	}
}

// packPanels lays b (k x n, row stride ldb) out as GemmPanels reads it:
// panels of GemmPanel columns, each k rows of GemmPanel floats, zero past
// n (ldp = k * GemmPanel between panels).
func packPanels(b []float32, ldb, k, n int) ([]float32, error) {
	if k <= 0 || n <= 0 || ldb < n || len(b) < (k-1)*ldb+n {
		return nil, fmt.Errorf("pack panels: bad shape %dx%d (ldb %d, %d floats)", k, n, ldb, len(b))
	}
	bp := make([]float32, (n+GemmPanel-1)/GemmPanel*k*GemmPanel)
	for j := 0; j < n; j += GemmPanel {
		for p := 0; p < k; p++ {
			copy(bp[(j/GemmPanel)*k*GemmPanel+p*GemmPanel:], b[p*ldb+j:p*ldb+min(j+GemmPanel, n)])
		}
	}
	return bp, nil
}

// sameBitsEveryTiling runs call (as tiledCall does) on every instruction
// set, once untiled and three times in random tiles whose columns start
// at multiples of nAlign, and requires want's bits each time.
func sameBitsEveryTiling(t *testing.T, gc gemmCase, r *rand.Rand, nAlign int, want []float32,
	call func(m0, n0, k0, ml, nl, kl int, c []float32) error) {
	t.Helper()
	for _, isa := range GemmISAs() {
		if err := SetGemmISA(isa); err != nil {
			t.Fatal(err)
		}
		for trial := 0; trial < 4; trial++ {
			mt, nt, kt := gc.m, gc.n, gc.k
			if trial > 0 {
				mt, nt, kt = 1+r.Intn(gc.m), nAlign*(1+r.Intn((gc.n+nAlign-1)/nAlign)), 1+r.Intn(gc.k)
			}
			c := tiledCall(t, gc, mt, nt, kt, call)
			for i := range want {
				if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
					t.Fatalf("case %+v, %s, tiles %dx%d, K in %d: C[%d] = %v, want %v", gc, isa, mt, nt, kt, i, c[i], want[i])
				}
			}
		}
	}
}

// TestGemmPanelsSameBits checks that B stored in panels (sk_gemm_panels)
// gives every element the bits of the row-major product, on every
// instruction set, for tiles that start at panel boundaries and K split
// anywhere (as kernel blocks and preemptible copies cut it).
func TestGemmPanelsSameBits(t *testing.T) {
	defer SetGemmISA("")
	r := rand.New(rand.NewSource(5))
	cases := []gemmCase{{1, 1000, 1280, false, false}, {1, 70, 9, false, false}, {3, 17, 5, true, false},
		{12, 32, 256, false, false}, {13, 31, 257, true, false}, {25, 65, 600, false, false},
		{97, 100, 27, false, false}, {130, 200, 300, true, false}}
	for ci, gc := range cases {
		a, lda, b, ldb := gemmOperands(gc, int64(100+ci))
		if err := SetGemmISA("generic"); err != nil {
			t.Fatal(err)
		}
		want := gemmTiled(t, gc, a, lda, b, ldb, gc.m, gc.n, gc.k)
		bp, err := packPanels(b, ldb, gc.k, gc.n)
		if err != nil {
			t.Fatal(err)
		}
		ldp := gc.k * GemmPanel
		sameBitsEveryTiling(t, gc, r, GemmPanel, want, func(m0, n0, k0, ml, nl, kl int, c []float32) error {
			ao := m0*lda + k0
			if gc.ta {
				ao = k0*lda + m0
			}
			return GemmPanels(gc.ta, ml, nl, kl, a[ao:], lda, bp[(n0/GemmPanel)*ldp+k0*GemmPanel:], ldp, c, gc.n, k0 > 0)
		})
	}
}

// TestGemmAPanelsSameBits checks that A stored transposed in panels
// (sk_gemm_apanels, a convolution's weights stored once for both products)
// gives every element the bits of the row-major product, on every
// instruction set, for tiles starting at any row and K split anywhere.
func TestGemmAPanelsSameBits(t *testing.T) {
	defer SetGemmISA("")
	r := rand.New(rand.NewSource(6))
	cases := []gemmCase{{1, 70, 9, false, false}, {12, 32, 256, false, false}, {13, 31, 257, false, false},
		{64, 49, 576, false, false}, {97, 100, 27, false, false}, {130, 20, 1100, false, false}}
	for ci, gc := range cases {
		a, lda, b, ldb := gemmOperands(gc, int64(200+ci))
		if err := SetGemmISA("generic"); err != nil {
			t.Fatal(err)
		}
		want := gemmTiled(t, gc, a, lda, b, ldb, gc.m, gc.n, gc.k)
		at := make([]float32, gc.k*gc.m) // A^T, k x m
		for i := 0; i < gc.m; i++ {
			for p := 0; p < gc.k; p++ {
				at[p*gc.m+i] = a[i*lda+p]
			}
		}
		ap, err := packPanels(at, gc.m, gc.k, gc.m)
		if err != nil {
			t.Fatal(err)
		}
		ldpa := gc.k * GemmPanel
		sameBitsEveryTiling(t, gc, r, 1, want, func(m0, n0, k0, ml, nl, kl int, c []float32) error {
			return GemmAPanels(ml, nl, kl, ap[k0*GemmPanel:], ldpa, m0, b[k0*ldb+n0:], ldb, c, gc.n, k0 > 0)
		})
	}
}

// TestGemmRejectsBadShapes checks the Go wrapper's argument checks.
func TestGemmRejectsBadShapes(t *testing.T) {
	a, b, c := make([]float32, 6), make([]float32, 6), make([]float32, 4)
	if err := Gemm(false, false, 2, 2, 3, a, 3, b, 2, c, 2, false); err != nil {
		t.Fatalf("valid call: %v", err)
	}
	for _, bad := range []func() error{
		func() error { return Gemm(false, false, 0, 2, 3, a, 3, b, 2, c, 2, false) },
		func() error { return Gemm(false, false, 2, 2, 3, a, 2, b, 2, c, 2, false) },
		func() error { return Gemm(false, false, 2, 2, 4, a, 4, b, 2, c, 2, false) },
		func() error { return Gemm(false, false, 3, 2, 3, a, 3, b, 2, c, 2, false) },
		func() error { return SetGemmISA("sse1") },
	} {
		if bad() == nil {
			t.Fatal("a bad call was accepted")
		}
	}
}

// BenchmarkGemm times the GEMM core on each instruction set over shapes of
// the zoo models' layers (a ResNet-50 3x3 convolution tile, a batch-1 and
// a batch-8 fully connected layer): go test -run '^$' -bench Gemm
// ./native/cpu/ (one thread; GFLOP/s in the flop/s column's place).
func BenchmarkGemm(b *testing.B) {
	defer SetGemmISA("")
	for _, gc := range []gemmCase{{128, 784, 1152, false, false}, {1, 1000, 512, false, false}, {8, 1000, 2048, false, false}, {32, 12544, 27, false, false},
		{512, 49, 4608, false, false}, {512, 16, 4608, false, false}, {64, 16, 4608, false, false}, {256, 196, 2304, false, false},
		// ResNet-50's 1x1 convolutions at batch 1 (B is the activations, N = H*W)
		{64, 3136, 256, false, false}, {256, 3136, 64, false, false}, {128, 784, 512, false, false}, {512, 784, 128, false, false},
		{256, 196, 1024, false, false}, {1024, 196, 256, false, false}, {512, 49, 2048, false, false}, {2048, 49, 512, false, false},
		// BERT-base's products at 128 tokens: N a multiple of 1024
		{128, 3072, 768, false, false}, {128, 768, 3072, false, false}} {
		a, lda, bm, ldb := gemmOperands(gc, 1)
		c := make([]float32, gc.m*gc.n)
		for _, isa := range GemmISAs() {
			b.Run(fmt.Sprintf("%dx%dx%d/%s", gc.m, gc.n, gc.k, isa), func(b *testing.B) {
				if err := SetGemmISA(isa); err != nil {
					b.Fatal(err)
				}
				for i := 0; i < b.N; i++ {
					if err := Gemm(false, false, gc.m, gc.n, gc.k, a, lda, bm, ldb, c, gc.n, false); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(2*float64(gc.m)*float64(gc.n)*float64(gc.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// planGemm plans a GEMM kernel (m x n x k, row-major, alpha 1) for two
// units over operands filled from seed; its blocks are not run.
func planGemm(t *testing.T, m, n, k int64, seed uint32) (a, b, out *cfloats, ks *Kernels) {
	t.Helper()
	a, b = newFloats(t, int(m*k), 0), newFloats(t, int(k*n), 0)
	fillLCG(a, &seed)
	fillLCG(b, &seed)
	out = newFloats(t, int(m*n), 0)
	d := Desc{Op: OpGemm, Out: out.p}
	d.In[0], d.In[1] = a.p, b.p
	d.P[0], d.P[1], d.P[2], d.P[5], d.P[6], d.P[7] = m, n, k, k, n, n
	d.P[8], d.P[9], d.P[10] = 1, 1, 1
	d.F[0] = 1
	ks = newKernels(t, 1)
	if err := ks.Set(0, &d, 2); err != nil {
		t.Fatalf("%dx%dx%d: %v", m, n, k, err)
	}
	return a, b, out, ks
}

// sameAsGemm fails t unless out holds, bit for bit, one Gemm call's a x b.
func sameAsGemm(t *testing.T, name string, a, b, out *cfloats, m, n, k int64) {
	t.Helper()
	want := make([]float32, m*n)
	if err := Gemm(false, false, int(m), int(n), int(k), a.s(), int(k), b.s(), int(n), want, int(n), false); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Float32bits(out.s()[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] = %v, want %v", name, i, out.s()[i], want[i])
		}
	}
}

// TestGemmRowsFirstTiles checks sk_prep_gemm's tile plan for a
// memory-bound product with a large output (a 1x1 convolution expanding
// 16 channels to 96 at 112x112): tiles of one micro-kernel row group (12
// rows) and long runs of columns, so the output leaves the cache in long
// runs; consecutive blocks take the row groups of one column tile. A
// product with a long reduction keeps the tall tiles. Either way every
// block together gives the bits of one Gemm call.
func TestGemmRowsFirstTiles(t *testing.T) {
	for _, c := range []struct {
		m, n, k  int64
		rowTiles int64 // ceil(M / the tile's rows)
	}{
		{96, 12544, 16, 8}, // rows first: 12-row tiles
		{96, 12544, 64, 8},
		{96, 12544, 576, 1}, // compute-bound: whole-height tiles
		{32, 12544, 16, 1},  // too few rows to cut
		{96, 256, 16, 1},    // a small output
	} {
		name := fmt.Sprintf("%dx%dx%d", c.m, c.n, c.k)
		a, b, out, ks := planGemm(t, c.m, c.n, c.k, uint32(c.k))
		grid := ks.Info(0).Grid
		tile := ks.Tiling(0)
		if got := (c.m + tile[0] - 1) / tile[0]; got != c.rowTiles || tile[0]*tile[1] > 32768 {
			t.Errorf("%s: tiles of %d x %d (%d row tiles), want %d row tiles of at most 32768 floats", name, tile[0], tile[1], got, c.rowTiles)
		}
		if c.rowTiles > 1 && tile[1] < c.n {
			// rows first: the first two blocks are the first two row
			// groups of the first column tile (B read once for both)
			nan := float32(math.NaN())
			o := out.s()
			for i := range o {
				o[i] = nan
			}
			ks.RunBlock(0, 0)
			ks.RunBlock(0, 1)
			for r := int64(0); r < c.m; r++ {
				for col := int64(0); col < c.n; col++ {
					written := !math.IsNaN(float64(o[r*c.n+col]))
					if want := r < 2*tile[0] && col < tile[1]; written != want {
						t.Fatalf("%s: blocks 0 and 1 wrote [%d][%d]: %v, want %v (tiles %d x %d)", name, r, col, written, want, tile[0], tile[1])
					}
				}
			}
		}
		runBlocks(ks, 0)
		sameAsGemm(t, fmt.Sprintf("%s (grid %d)", name, grid), a, b, out, c.m, c.n, c.k)
	}
}

// TestGemmColsFirstTiles checks sk_prep_gemm's tile plan for a product
// whose B is far larger than A (BERT's second feed-forward product at 128
// tokens, 128x768x3072): tiles keep A's rows whole and cut B's columns,
// down to one panel, so each tile of B is read once. A taller A (the same
// product at batch 8) or a B not much wider than A is tall keeps the plan
// that cuts the larger side. Every plan gives the bits of one Gemm call.
func TestGemmColsFirstTiles(t *testing.T) {
	for _, c := range []struct {
		m, n, k  int64
		colsOnly bool  // tiles of all M rows
		cols     int64 // and this many columns (0: any)
	}{
		{128, 768, 3072, true, 32},
		{128, 3072, 768, true, 96}, // enough tiles before one panel
		{1024, 768, 3072, false, 0},
		{256, 768, 3072, false, 0}, // B only 3x wider than A is tall
	} {
		name := fmt.Sprintf("%dx%dx%d", c.m, c.n, c.k)
		a, b, out, ks := planGemm(t, c.m, c.n, c.k, uint32(c.m))
		tile := ks.Tiling(0)
		if whole := tile[0] == c.m; whole != c.colsOnly {
			t.Errorf("%s: tiles of %d x %d: whole rows %v, want %v", name, tile[0], tile[1], whole, c.colsOnly)
		}
		if c.cols > 0 && tile[1] != c.cols {
			t.Errorf("%s: tiles of %d x %d, want %d columns", name, tile[0], tile[1], c.cols)
		}
		runBlocks(ks, 0)
		sameAsGemm(t, name, a, b, out, c.m, c.n, c.k)
	}
}

// BenchmarkGemmPanels times products whose B is a constant in a layout
// the engine chooses at load, one thread, the calls an engine block makes
// (tiles of mt x nt): B row-major against B in panels (GemmPanels), and a
// convolution's product (weights x im2col, Cout x OHW x Kd) as it is
// against transposed, the weights' panels as B (same bits every way; the
// transposed form leaves its output transposed, which an engine block
// then transposes into place: not timed here).
// "cold" evicts the operands from the caches before each product (a
// batch-1 fully connected layer streams its weights from memory):
// go test -run '^$' -bench GemmPanels ./native/cpu/
func BenchmarkGemmPanels(b *testing.B) {
	defer SetGemmISA("")
	evict := make([]byte, 128<<20)
	for _, c := range []struct {
		m, n, k, mt, nt int
		cold            bool
	}{{1, 1000, 1280, 1, 256, true}, {1, 1000, 1280, 1, 256, false},
		{128, 3072, 768, 128, 96, false}, {128, 768, 3072, 128, 96, false}} {
		gc := gemmCase{m: c.m, n: c.n, k: c.k}
		a, lda, bm, ldb := gemmOperands(gc, 1)
		bp, err := packPanels(bm, ldb, c.k, c.n)
		if err != nil {
			b.Fatal(err)
		}
		cm := make([]float32, c.m*c.n)
		for _, layout := range []string{"rowmajor", "panels"} {
			name := fmt.Sprintf("%dx%dx%d-tiles%dx%d/%s", c.m, c.n, c.k, c.mt, c.nt, layout)
			if c.cold {
				name += "-cold"
			}
			b.Run(name, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if c.cold {
						b.StopTimer()
						for j := 0; j < len(evict); j += 64 {
							evict[j]++
						}
						b.StartTimer()
					}
					for m0 := 0; m0 < c.m; m0 += c.mt {
						for n0 := 0; n0 < c.n; n0 += c.nt {
							ml, nl := min(c.mt, c.m-m0), min(c.nt, c.n-n0)
							var err error
							if layout == "panels" {
								err = GemmPanels(false, ml, nl, c.k, a[m0*lda:], lda, bp[(n0/GemmPanel)*c.k*GemmPanel:], c.k*GemmPanel, cm[m0*c.n+n0:], c.n, false)
							} else {
								err = Gemm(false, false, ml, nl, c.k, a[m0*lda:], lda, bm[n0:], ldb, cm[m0*c.n+n0:], c.n, false)
							}
							if err != nil {
								b.Fatal(err)
							}
						}
					}
				}
				b.ReportMetric(2*float64(c.m)*float64(c.n)*float64(c.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
	for _, c := range []struct{ cout, ohw, kd int }{{512, 49, 4608}, {256, 196, 2304}, {1280, 49, 320}, {320, 49, 960}} {
		w, _, col, _ := gemmOperands(gemmCase{m: c.cout, n: c.ohw, k: c.kd}, 2)
		wt := make([]float32, c.kd*c.cout)
		for o := 0; o < c.cout; o++ {
			for p := 0; p < c.kd; p++ {
				wt[p*c.cout+o] = w[o*(c.kd+1)+p]
			}
		}
		wp, err := packPanels(wt, c.cout, c.kd, c.cout)
		if err != nil {
			b.Fatal(err)
		}
		y := make([]float32, c.cout*c.ohw)
		for _, form := range []string{"as-is", "transposed"} {
			b.Run(fmt.Sprintf("conv-%dx%dx%d/%s", c.cout, c.ohw, c.kd, form), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					var err error
					if form == "transposed" {
						err = GemmPanels(true, c.ohw, c.cout, c.kd, col, c.ohw+1, wp, c.kd*GemmPanel, y, c.cout, false)
					} else {
						err = Gemm(false, false, c.cout, c.ohw, c.kd, w, c.kd+1, col, c.ohw+1, y, c.ohw, false)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(2*float64(c.cout)*float64(c.ohw)*float64(c.kd)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkPointwise times 1x1 convolutions as the engine runs them, one
// GEMM kernel over a batch of 8 images (C[b] = W x X[b] + bias, X[b] of K
// channels by H*W positions, read where it lies), every block in turn on
// one thread: MobileNetV2's and ResNet-50's pointwise layers, whose
// activations stream from memory.
func BenchmarkPointwise(b *testing.B) {
	const batch = 8
	for _, c := range []struct{ m, n, k int64 }{
		{96, 12544, 16}, {16, 12544, 32}, {24, 3136, 96}, {144, 3136, 24}, {24, 3136, 144},
		{32, 784, 192}, {64, 196, 384}, {256, 3136, 64}, {64, 3136, 256}, {128, 784, 512},
		{512, 784, 128}, {256, 196, 1024}, {1024, 196, 256},
	} {
		w, x := newFloats(b, int(c.m*c.k), 0), newFloats(b, int(batch*c.k*c.n), 0)
		bias, y := newFloats(b, int(c.m), 0.5), newFloats(b, int(batch*c.m*c.n), 0)
		rnd := uint32(c.k)
		fillLCG(w, &rnd)
		fillLCG(x, &rnd)
		d := Desc{Op: OpGemm, Out: y.p}
		d.In[0], d.In[1], d.In[2] = w.p, x.p, bias.p
		d.P[0], d.P[1], d.P[2], d.P[5], d.P[6], d.P[7] = c.m, c.n, c.k, c.k, c.n, c.n
		d.P[8], d.P[9], d.P[10] = batch, 1, 1
		d.P[14], d.P[17], d.P[23] = c.k*c.n, c.m*c.n, 1
		d.F[0] = 1
		b.Run(fmt.Sprintf("%dx%dx%d", c.m, c.n, c.k), func(b *testing.B) {
			ks := newKernels(b, 1)
			if err := ks.Set(0, &d, 1); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				runBlocks(ks, 0)
			}
			b.ReportMetric(2*float64(batch*c.m*c.n*c.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
