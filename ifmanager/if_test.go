package ifmanager

import (
	"context"
	"errors"
	"sync"
	"testing"

	"sluice/libml"
	"sluice/libml/graph"
)

// shareBackend is a backend whose instances take shares (as the cuda
// backend's do) and copy their input to their output.
type shareBackend struct {
	mu     sync.Mutex
	shares map[int][]float64 // instance id -> SetShare calls
	next   int
	refuse bool
}

type shareInst struct {
	be *shareBackend
	id int
}

func (b *shareBackend) Name() string                                    { return "share" }
func (b *shareBackend) Init(context.Context, libml.BackendConfig) error { return nil }
func (b *shareBackend) Deinit() error                                   { return nil }
func (b *shareBackend) LoadModel(context.Context, string, *graph.Graph) (libml.Instance, error) {
	return b.newInst(), nil
}
func (b *shareBackend) LinkModel(context.Context, libml.Instance) (libml.Instance, error) {
	return b.newInst(), nil
}
func (b *shareBackend) ConfigureBatch(libml.Instance, int) error { return nil }
func (b *shareBackend) InferBatch(_ context.Context, _ libml.Instance, n int, in, out []float32) error {
	copy(out[:n*2], in[:n*2])
	return nil
}
func (b *shareBackend) InferInput(_ context.Context, _ libml.Instance, in *libml.Input, out []float32) error {
	n := in.N()
	if err := in.Decode(out[:n*2], 0, n); err != nil {
		return err
	}
	in.Copies = 1
	in.Gather()
	return nil
}
func (b *shareBackend) newInst() *shareInst {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	return &shareInst{be: b, id: b.next}
}
func (b *shareBackend) calls(id int) []float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]float64(nil), b.shares[id]...)
}

func (i *shareInst) Model() string        { return "copy" }
func (i *shareInst) InputShape() []int64  { return []int64{2} }
func (i *shareInst) OutputShape() []int64 { return []int64{2} }
func (i *shareInst) InputSize() int       { return 2 }
func (i *shareInst) OutputSize() int      { return 2 }
func (i *shareInst) Close() error         { return nil }
func (i *shareInst) SetShare(s float64) error {
	i.be.mu.Lock()
	defer i.be.mu.Unlock()
	if i.be.shares == nil {
		i.be.shares = map[int][]float64{}
	}
	i.be.shares[i.id] = append(i.be.shares[i.id], s)
	if i.be.refuse {
		return errors.New("no partitions here")
	}
	return nil
}

// An instance that takes shares gets the IF's share when the IF is made,
// at start-up allocation, and on the shadow of a swap that changes it; a
// refused share leaves the IF serving.
func TestSharesReachInstances(t *testing.T) {
	be := &shareBackend{}
	first := be.newInst()
	f, err := New(Config{Name: "g", MaxBatch: 2, QueueLen: 4, Share: 0.5}, be, first, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := be.calls(first.id); len(got) != 1 || got[0] != 0.5 {
		t.Fatalf("at creation: SetShare calls %v, want [0.5]", got)
	}
	f.SetUnitsBeforeStart(0, 0.25)
	if got := be.calls(first.id); len(got) != 2 || got[1] != 0.25 {
		t.Fatalf("at start-up allocation: SetShare calls %v, want [0.5 0.25]", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if _, err := f.Swap(ctx, SwapSpec{Share: 0.75}); err != nil {
		t.Fatal(err)
	}
	shadow := first.id + 1
	if got := be.calls(shadow); len(got) != 1 || got[0] != 0.75 {
		t.Fatalf("shadow of a swap to 0.75: SetShare calls %v", got)
	}
	if st := f.Status(); st.Share != 0.75 {
		t.Fatalf("share after the swap %v", st.Share)
	}
	// a swap without a new share keeps the current one on the shadow
	if _, err := f.Swap(ctx, SwapSpec{}); err != nil {
		t.Fatal(err)
	}
	if got := be.calls(shadow + 1); len(got) != 1 || got[0] != 0.75 {
		t.Fatalf("shadow of a plain swap: SetShare calls %v", got)
	}
	be.mu.Lock()
	be.refuse = true
	be.mu.Unlock()
	if _, err := f.Swap(ctx, SwapSpec{Share: 0.5}); err != nil {
		t.Fatalf("a refused share failed the swap: %v", err)
	}
}
