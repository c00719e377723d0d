package kprof

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Dominance (REEF §5.3): a version no worse in kernel time, block time,
// block count, scratch, block bandwidth and occupancy and better in one
// dominates; better in one and worse in another does not; equal versions
// do not dominate each other; a version without times dominates nothing
// and loses to any with them.
func TestDominates(t *testing.T) {
	base := Version{Grid: 100, Occupancy: 3, KernNs: 1e5, BlockNs: 1e4, ScratchBytes: 64, BlockBW: 500}
	with := func(f func(*Version)) Version {
		v := base
		f(&v)
		return v
	}
	for _, c := range []struct {
		name string
		a, b Version
		want bool
	}{
		{"equal", base, base, false},
		{"faster kernel", with(func(v *Version) { v.KernNs = 9e4 }), base, true},
		{"shorter blocks", with(func(v *Version) { v.BlockNs = 5e3 }), base, true},
		{"fewer blocks", with(func(v *Version) { v.Grid = 25 }), base, true},
		{"higher occupancy", with(func(v *Version) { v.Occupancy = 4 }), base, true},
		{"less scratch", with(func(v *Version) { v.ScratchBytes = 32 }), base, true},
		{"less bandwidth", with(func(v *Version) { v.BlockBW = 400 }), base, true},
		{"slower kernel", with(func(v *Version) { v.KernNs = 2e5 }), base, false},
		// the smaller tile's trade: shorter blocks, more of them
		{"shorter blocks, more of them", with(func(v *Version) { v.BlockNs = 3e3; v.Grid = 400 }), base, false},
		{"faster, lower occupancy", with(func(v *Version) { v.KernNs = 5e4; v.Occupancy = 2 }), base, false},
		{"faster, more scratch", with(func(v *Version) { v.KernNs = 5e4; v.ScratchBytes = 128 }), base, false},
		{"no times", with(func(v *Version) { v.KernNs, v.BlockNs, v.Grid = 0, 0, 1 }), base, false},
		{"against no times", base, with(func(v *Version) { v.BlockNs = 0 }), true},
	} {
		if got := Dominates(&c.a, &c.b); got != c.want {
			t.Errorf("%s: Dominates = %v, want %v", c.name, got, c.want)
		}
		if c.want && Dominates(&c.b, &c.a) {
			t.Errorf("%s: dominance both ways", c.name)
		}
	}
}

// Prune marks, per kernel, the versions another version of the same
// kernel dominates, and the later of equal ones; never across kernels,
// never every version of a kernel; it clears stale marks.
func TestPrune(t *testing.T) {
	m := &Model{Kernels: []Kernel{
		// version 1 trades block time for blocks: both stay
		{Index: 0, Versions: []Version{
			{Grid: 12, Occupancy: 3, KernNs: 4e4, BlockNs: 9e3},
			{Grid: 48, Occupancy: 3, KernNs: 5e4, BlockNs: 3e3}}},
		// one version, stale mark cleared
		{Index: 1, Versions: []Version{{Grid: 500, Occupancy: 1, KernNs: 9e5, BlockNs: 9e4, Pruned: true}}},
		// version 1 as many blocks, faster in both: version 0 goes
		{Index: 2, Versions: []Version{
			{Grid: 1, Occupancy: 3, KernNs: 2e4, BlockNs: 2e4},
			{Grid: 1, Occupancy: 3, KernNs: 1e4, BlockNs: 1e4}}},
		// equal versions: the first stays
		{Index: 3, Versions: []Version{
			{Grid: 8, Occupancy: 2, KernNs: 3e4, BlockNs: 3e3},
			{Grid: 8, Occupancy: 2, KernNs: 3e4, BlockNs: 3e3}}},
		// cpu tilings: the third is worse in every respect
		{Index: 4, Versions: []Version{
			{TileUnits: 2, Grid: 8, BlockNs: 100, KernNs: 500, ScratchBytes: 10, BlockBW: 5},
			{TileUnits: 8, Grid: 32, BlockNs: 30, KernNs: 550, ScratchBytes: 10, BlockBW: 5},
			{TileUnits: 1, Grid: 8, BlockNs: 120, KernNs: 600, ScratchBytes: 10, BlockBW: 5}}},
	}}
	Prune(m)
	want := [][]bool{{false, false}, {false}, {true, false}, {false, true}, {false, false, true}}
	for k := range m.Kernels {
		for v, vp := range m.Kernels[k].Versions {
			if vp.Pruned != want[k][v] {
				t.Errorf("kernel %d version %d: pruned %v, want %v", k, v, vp.Pruned, want[k][v])
			}
		}
	}
	// seeded sets (the same every run): the survivors are exactly the
	// versions nothing dominates and no earlier version equals, and at
	// least one survives
	r := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 2000; iter++ {
		vs := make([]Version, 1+r.IntN(5))
		for v := range vs {
			vs[v] = Version{Grid: int64(1 + r.IntN(4)), Occupancy: 1 + r.IntN(3),
				KernNs: float64(1 + r.IntN(4)), BlockNs: float64(1 + r.IntN(4)), ScratchBytes: int64(r.IntN(2))}
		}
		m := &Model{Kernels: []Kernel{{Versions: vs}}}
		Prune(m)
		kept := 0
		for a := range vs {
			beaten := false
			for b := range vs {
				if Dominates(&vs[b], &vs[a]) || (b < a && sameCost(&vs[a], &vs[b])) {
					beaten = true
				}
			}
			if vs[a].Pruned != beaten {
				t.Fatalf("%+v: version %d pruned %v, want %v", vs, a, vs[a].Pruned, beaten)
			}
			if !vs[a].Pruned {
				kept++
			}
		}
		if kept == 0 {
			t.Fatalf("every version pruned: %+v", vs)
		}
	}
}

// Check rejects what no reader can use; the JSON round trips (a set
// through WriteJSON and ReadSet, a model through Save and Load) keep
// every field.
func TestCheckAndRoundTrip(t *testing.T) {
	good := Model{Model: "m", Batch: 2, Device: "cuda", Units: 132, Runs: 20, Timing: "events", PadOccupancy: 2,
		TotalNs: 3e4, WallNs: 3e4, Kernels: []Kernel{
			{Index: 0, Op: "Gemm", Ops: "Gemm+Relu", Name: "k0", Bytes: 4096, Versions: []Version{
				{Entry: "sg_gemm64", Grid: 40, Occupancy: 2, SMs: 20, BlockNs: 1e3, KernNs: 2e4, RingBlocks: 40},
				{Entry: "sg_gemm32", Grid: 160, Occupancy: 4, SMs: 40, BlockNs: 4e2, KernNs: 2.5e4, RingBlocks: 160}}},
			{Index: 1, Op: "Nop", Versions: []Version{{}}},
		}}
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(*Model){
		"no batch":       func(m *Model) { m.Batch = 0 },
		"no units":       func(m *Model) { m.Units = 0 },
		"index":          func(m *Model) { m.Kernels[1].Index = 5 },
		"no versions":    func(m *Model) { m.Kernels[1].Versions = nil },
		"negative time":  func(m *Model) { m.Kernels[0].Versions[1].BlockNs = -1 },
		"negative grid":  func(m *Model) { m.Kernels[0].Versions[0].Grid = -1 },
		"negative occup": func(m *Model) { m.Kernels[0].Versions[0].Occupancy = -1 },
	} {
		bad := good
		bad.Kernels = slices.Clone(good.Kernels)
		for k := range bad.Kernels {
			bad.Kernels[k].Versions = slices.Clone(good.Kernels[k].Versions)
		}
		f(&bad)
		if err := bad.Check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}

	var buf bytes.Buffer
	set := &Set{Device: "H100", Command: "gpubench kprof", Models: []Model{good}}
	if err := set.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := ReadSet(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got := back.Find("m", 2)
	if got == nil || back.Find("m", 3) != nil || back.Device != "H100" {
		t.Fatalf("Find: %+v", back)
	}
	same := func(what string, a, b *Model) {
		if a.Model != b.Model || a.Batch != b.Batch || a.Device != b.Device || a.Units != b.Units || a.Runs != b.Runs ||
			a.Timing != b.Timing || a.PadOccupancy != b.PadOccupancy || a.TotalNs != b.TotalNs || len(a.Kernels) != len(b.Kernels) {
			t.Fatalf("%s: %+v, want %+v", what, a, b)
		}
		for k := range a.Kernels {
			x, y := a.Kernels[k], b.Kernels[k]
			if x.Index != y.Index || x.Op != y.Op || x.Ops != y.Ops || x.Name != y.Name || x.Bytes != y.Bytes || !slices.Equal(x.Versions, y.Versions) {
				t.Fatalf("%s: kernel %d %+v, want %+v", what, k, x, y)
			}
		}
	}
	same("set round trip", got, &good)
	path := filepath.Join(t.TempDir(), "p.json")
	if err := good.Save(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	same("Save and Load", loaded, &good)

	for _, in := range []string{
		`{"models":[{"model":"x","batch":1,"units":0}]}`,
		`{"models":[{"model":"x","batch":1,"units":4,"kernels":[{"index":0}]}]}`,
		`{"models":[],"unknown":1}`,
		`not json`,
	} {
		if _, err := ReadSet(strings.NewReader(in)); err == nil {
			t.Errorf("ReadSet(%s) accepted", in)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("Load of a missing file")
	}
}

// Summarize counts versions, the ones pruning kept, and the kernels
// narrower than the device (padding opportunities) with their time.
func TestSummarize(t *testing.T) {
	m := &Model{Kernels: []Kernel{
		{Versions: []Version{{Grid: 2, KernNs: 10, BlockNs: 5}, {Grid: 8, KernNs: 12, BlockNs: 2, Pruned: true}}},
		{Versions: []Version{{Grid: 64, KernNs: 100, BlockNs: 3}}},
		{Versions: []Version{{}}},
	}}
	s := Summarize(m, 8)
	if s.Kernels != 3 || s.Versions != 4 || s.Kept != 3 || s.NarrowKernels != 1 || s.NarrowNs != 10 {
		t.Errorf("%+v", s)
	}
}
