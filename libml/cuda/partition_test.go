package cuda

import (
	"context"
	"slices"
	"testing"

	"sluice/libml"
	"sluice/libml/zoo"
)

// Partitions are placed on the slots the fewest partitions use: ones
// that fit side by side share no slot, one that does not fit overlaps
// the least used, and closing a partition frees its slots.
func TestPartitionPlacement(t *testing.T) {
	cases := []struct {
		use  []int
		k    int
		want int
	}{
		{[]int{0, 0, 0, 0}, 2, 0},
		{[]int{1, 1, 0, 0}, 2, 2},
		{[]int{1, 0, 0, 1}, 2, 1},
		{[]int{1, 0, 1, 0}, 1, 1},
		{[]int{1, 1, 1, 1}, 2, 0},
		{[]int{2, 1, 1, 2}, 2, 1},
		{[]int{0, 2, 0, 0}, 2, 2},
		{[]int{0, 0, 0, 0}, 4, 0},
	}
	for _, c := range cases {
		s := smSlots{gran: 2, use: slices.Clone(c.use)}
		if got := s.place(c.k); got != c.want {
			t.Errorf("use %v: %d slots placed at %d, want %d", c.use, c.k, got, c.want)
		}
	}

	// through the backend on the emulator (8 SMs, slots of 2): instances
	// with half the device each take the two halves
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, true)
	g, err := zoo.Build("mlp", zoo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var insts []*Instance
	defer func() {
		for _, i := range insts {
			i.Close()
		}
	}()
	slotsOf := func(i *Instance) (int, int) {
		c, ok := i.ln.ctx.(*slotCtx)
		if !ok {
			t.Fatalf("instance's context is a %T, not a placed partition", i.ln.ctx)
		}
		return c.first, c.n
	}
	for _, want := range [][2]int{{0, 2}, {2, 2}, {0, 2}} {
		inst, err := b.LoadModel(context.Background(), "mlp", g)
		if err != nil {
			t.Fatal(err)
		}
		i := inst.(*Instance)
		insts = append(insts, i)
		if err := i.SetSMs(emuSMs / 2); err != nil {
			t.Fatal(err)
		}
		if f, n := slotsOf(i); f != want[0] || n != want[1] {
			t.Errorf("instance %d: slots %d..%d, want %d..%d", len(insts), f, f+n-1, want[0], want[0]+want[1]-1)
		}
	}
	// the first instance back on the whole device frees slots 0-1 (the
	// third still uses them)
	if err := insts[0].SetSMs(0); err != nil {
		t.Fatal(err)
	}
	if got := slices.Clone(b.slots.use); !slices.Equal(got, []int{1, 1, 1, 1}) {
		t.Errorf("slot use %v after a partition closed, want [1 1 1 1]", got)
	}
	// the second moving to a quarter: its own slots 2-3 count as free,
	// so it stays beside the third rather than on it
	if err := insts[1].SetSMs(2); err != nil {
		t.Fatal(err)
	}
	if f, n := slotsOf(insts[1]); f != 2 || n != 1 {
		t.Errorf("a quarter after moving: slots %d..%d, want 2..2", f, f+n-1)
	}
	for _, i := range insts {
		if err := i.Close(); err != nil {
			t.Fatal(err)
		}
	}
	insts = nil
	if got := b.slots.use; !slices.Equal(got, []int{0, 0, 0, 0}) {
		t.Errorf("slot use %v after every instance closed, want all 0", got)
	}
}
