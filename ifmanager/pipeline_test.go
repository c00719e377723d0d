package ifmanager

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"sluice/dataplane/wire"
	"sluice/libml/graph"
	"sluice/libml/zoo"
)

// stage is a pipeline stage that is not routed: an IF of its own, on the
// path's backend, fed by the routed IF's results.
type stage struct {
	f    *IF
	done chan struct{}
}

// newNextStage loads g on p's backend as an IF of its own (model id 8,
// batches of up to 4), not routed, and runs it.
func newNextStage(t *testing.T, p *path, name string, g *graph.Graph) *stage {
	t.Helper()
	inst, err := p.be.LoadModel(context.Background(), name, g)
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(Config{Name: name, ModelID: 8, MaxBatch: 4, QueueLen: 64, Input: InputF32, Batching: "fixed"}, p.be, inst, p.obs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return newStage(t, f)
}

// sendOne sends request id with payload and returns its answer's status,
// once the path has answered it (a hang guard of a minute, not a timing).
func (p *path) sendOne(id uint64, payload []byte) wire.Status {
	p.t.Helper()
	p.inject(p.datagrams(id, payload))
	p.poll()
	select {
	case <-p.obs.answered:
	case <-time.After(time.Minute):
		p.t.Fatal("no answer in a minute")
	}
	p.poll()
	s, _ := p.answer(id)
	return s
}

func newStage(t *testing.T, f *IF) *stage {
	t.Helper()
	st := &stage{f: f, done: make(chan struct{})}
	go func() { f.Run(context.Background()); close(st.done) }()
	t.Cleanup(func() {
		_ = f.Stop(context.Background())
		<-st.done
	})
	return st
}

// TestPipeline: the routed IF (an MLP front end, 24 → 8) hands each
// result to a second IF (an MLP classifier, 8 → 3), which answers. Each
// stage batches on its own (batches of 4, then of at most 2). Every answer equals
// the two models run one after the other at batch 1, bit for bit; the
// front end answers nothing itself and forwards every request. With the
// second stage stopped, requests are answered shutting_down by the front
// end. Every buffer returns: packets, reply slots, both stages' output
// buffers.
func TestPipeline(t *testing.T) {
	front := zoo.MLP(zoo.Options{Seed: 1, Features: 24, Layers: 1, Hidden: 16, Classes: 8})
	p := newPathConfig(t, front, Config{Name: "front", ModelID: 7, MaxBatch: 4, QueueLen: 64, Input: InputF32, Batching: "fixed"}, 64, 1024, nil)
	p.keep = true
	ctx := context.Background()
	cls, err := p.be.LoadModel(ctx, "cls", zoo.MLP(zoo.Options{Seed: 2, Features: 8, Layers: 1, Hidden: 16, Classes: 3}))
	if err != nil {
		t.Fatal(err)
	}
	clsRef, err := p.be.LinkModel(ctx, cls)
	if err == nil {
		err = p.be.ConfigureBatch(clsRef, 1)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer clsRef.Close()
	second, err := New(Config{Name: "cls", ModelID: 8, MaxBatch: 2, QueueLen: 64, Input: InputF32, Batching: "fixed"}, p.be, cls, p.obs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.RequestBytes() != p.f.ResponseBytes() {
		t.Fatalf("the classifier takes %d bytes, the front end gives %d", second.RequestBytes(), p.f.ResponseBytes())
	}
	st := newStage(t, second)
	var gone atomic.Bool
	p.f.SetNext("cls", func() *IF {
		if !gone.Load() {
			return st.f
		}
		return nil
	})

	release, held := make(chan struct{}), make(chan struct{})
	go func() { _ = p.f.do(ctx, func() { close(held); <-release }) }()
	<-held
	want := map[uint64][]float32{}
	for id := uint64(1); id <= 8; id++ {
		x := zoo.Input(id, 24)
		mid := make([]float32, 8)
		if err := p.be.InferBatch(ctx, p.ref, 1, x, mid); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, 3)
		if err := p.be.InferBatch(ctx, clsRef, 1, mid, y); err != nil {
			t.Fatal(err)
		}
		want[id] = y
		p.inject(p.datagrams(id, f32le(x)))
	}
	p.poll()
	close(release)
	for range want {
		p.poll()
		select {
		case s := <-p.obs.answered:
			if s != wire.StatusOK {
				t.Fatalf("an answer %v", s)
			}
		case <-time.After(time.Minute):
			t.Fatal("no answer in a minute")
		}
	}
	p.poll()
	for id, w := range want {
		s, out := p.answer(id)
		if s != wire.StatusOK || !slices.Equal(out, f32le(w)) {
			t.Fatalf("request %d: %v %x, want the classifier on the front end's result", id, s, out)
		}
	}
	if p.f.C.Served.Load() != 0 || p.f.C.Forwarded.Load() != 8 || p.f.C.Batches.Load() != 2 {
		t.Fatalf("front end: served %d, forwarded %d, %d batches; want 0, 8, 2", p.f.C.Served.Load(), p.f.C.Forwarded.Load(), p.f.C.Batches.Load())
	}
	// the classifier's own bound (2), however the results reached it
	if st.f.C.Served.Load() != 8 || st.f.C.Batches.Load() < 4 {
		t.Fatalf("classifier: served %d in %d batches, want 8 in 4 or more", st.f.C.Served.Load(), st.f.C.Batches.Load())
	}

	// the second stage gone: answered unknown_model by the front end
	gone.Store(true)
	if s := p.sendOne(100, f32le(zoo.Input(100, 24))); s != wire.StatusUnknownModel || p.f.C.ForwardRefused.Load() != 1 {
		t.Fatalf("with no next stage: %v, %d refused", s, p.f.C.ForwardRefused.Load())
	}
	p.baseline()
	if s := st.f.Status(); s.OutBuffersInUse != 0 {
		t.Fatalf("classifier: %d output buffers out", s.OutBuffersInUse)
	}
}

func f32le(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// Stages whose next names make a loop (deploys can make one that a
// profile check cannot see) do not pass a request round for ever: after
// MaxStages stages it is answered internal.
func TestPipelineLoop(t *testing.T) {
	mlp := func(seed uint64) *graph.Graph {
		return zoo.MLP(zoo.Options{Seed: seed, Features: 8, Layers: 1, Hidden: 8, Classes: 8})
	}
	p := newPathConfig(t, mlp(1), Config{Name: "a", ModelID: 7, MaxBatch: 4, QueueLen: 64, Input: InputF32, Batching: "fixed"}, 64, 1024, nil)
	p.keep = true
	b := newNextStage(t, p, "b", mlp(2)).f
	p.f.SetNext("b", func() *IF { return b })
	b.SetNext("a", func() *IF { return p.f })
	if s := p.sendOne(1, f32le(zoo.Input(1, 8))); s != wire.StatusInternal {
		t.Fatalf("a request in a loop of stages: %v, want internal", s)
	}
	if fw := p.f.C.Forwarded.Load() + b.C.Forwarded.Load(); fw != MaxStages-1 {
		t.Fatalf("%d hand-overs, want %d (%d stages)", fw, MaxStages-1, MaxStages)
	}
	p.baseline()
}

// A next stage that stopped refuses what the first stage hands it: the
// request is answered shutting_down by the first stage, once, and the
// first stage's output buffer goes back.
func TestPipelineNextStopped(t *testing.T) {
	p := newPathConfig(t, zoo.MLP(zoo.Options{Seed: 1, Features: 8, Layers: 1, Hidden: 8, Classes: 8}),
		Config{Name: "a", ModelID: 7, MaxBatch: 4, QueueLen: 64, Input: InputF32, Batching: "fixed"}, 64, 1024, nil)
	p.keep = true
	st := newNextStage(t, p, "b", zoo.MLP(zoo.Options{Seed: 2, Features: 8, Layers: 1, Hidden: 8, Classes: 2}))
	b := st.f
	p.f.SetNext("b", func() *IF { return b })
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-st.done
	if s := p.sendOne(1, f32le(zoo.Input(1, 8))); s != wire.StatusShuttingDown || p.f.C.ForwardRefused.Load() != 1 || p.f.C.Forwarded.Load() != 0 {
		t.Fatalf("into a stopped stage: %v, %d refused, %d forwarded", s, p.f.C.ForwardRefused.Load(), p.f.C.Forwarded.Load())
	}
	p.baseline()
}
