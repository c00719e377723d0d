//go:build linux && cgo

package cuda

import (
	"context"
	"math/rand/v2"
	"syscall"
	"testing"
	"unsafe"

	"sluice/libml"
	"sluice/libml/cuda/internal/emu"
	"sluice/libml/zoo"
)

// packetRegion maps n bytes of anonymous memory, as the dataplane's mbuf
// region is.
func packetRegion(t testing.TB, n int) []byte {
	t.Helper()
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	return mem
}

// scatter cuts the batch's input bytes into fragments of 1..maxLen bytes,
// writes each at a random, often misaligned, place of the region (as
// packet payloads lie in mbufs) and returns their descriptors, shuffled.
func scatter(t testing.TB, r *rand.Rand, reg *Region, mem []byte, data []byte, maxLen int) []Frag {
	t.Helper()
	slot := maxLen + 64
	nslots := len(mem) / slot
	perm := r.Perm(nslots)
	var frags []Frag
	for off, k := 0, 0; off < len(data); k++ {
		if k >= nslots {
			t.Fatal("packet region too small")
		}
		n := min(1+r.IntN(maxLen), len(data)-off)
		pos := perm[k]*slot + r.IntN(64)
		copy(mem[pos:], data[off:off+n])
		f, err := reg.Frag(unsafe.Pointer(&mem[pos]), n, uint64(off))
		if err != nil {
			t.Fatal(err)
		}
		frags = append(frags, f)
		off += n
	}
	r.Shuffle(len(frags), func(i, j int) { frags[i], frags[j] = frags[j], frags[i] })
	return frags
}

// The zero-copy input path: a packet region registered with the device,
// the batch's requests scattered over it in fragments, gathered by
// sg_batch_gather into the input tensor and run: the outputs are those of
// InferBatch on the same inputs. A preemption during the gathered run
// restores as usual (the input stays in place). Bad fragments are refused
// before anything is queued.
func TestBackendGather(t *testing.T) {
	b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	inst := load(t, b, "sq", preemptModel(t, "squeezenet11"), 2).(*Instance)
	defer inst.Close()
	ctx := context.Background()
	isz := inst.InputSize()
	in := zoo.Input(12, 2*isz)
	want := infer(t, b, inst, 2, in)

	mem := packetRegion(t, 1<<20)
	reg, err := b.RegisterRegion(unsafe.Pointer(&mem[0]), len(mem))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(71, 72))
	frags := scatter(t, r, reg, mem, f32view(in), 1400)
	if err := b.GatherBatch(inst, 2, frags); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 2*inst.OutputSize())
	if err := b.InferGathered(ctx, inst, 2, out); err != nil {
		t.Fatal(err)
	}
	closeTo(t, "gathered batch", out, want, 0)
	t.Logf("%d fragments of up to 1400 bytes gathered into %d input bytes", len(frags), 4*len(in))
	if err := b.InferGathered(ctx, inst, 2, out); err == nil {
		t.Error("InferGathered without a new Gather succeeded")
	}

	// preempted while running on gathered input
	clear(out)
	if err := inst.Gather(2, frags); err != nil {
		t.Fatal(err)
	}
	d.h.armPreempt(5, emu.Options{Preempt: true, PreemptBlock: 0, PreemptAfterSyncs: 1})
	if err := inst.InferGathered(ctx, 2, out); err != nil {
		t.Fatal(err)
	}
	closeTo(t, "gathered batch, preempted", out, want, 0)

	// a gather of batch 1 into a batch-1 tensor
	f1 := scatter(t, r, reg, mem, f32view(in[:isz]), 700)
	if err := inst.Gather(1, f1); err != nil {
		t.Fatal(err)
	}
	if err := inst.InferGathered(ctx, 1, out[:inst.OutputSize()]); err != nil {
		t.Fatal(err)
	}
	closeTo(t, "gathered batch of 1", out[:inst.OutputSize()], want[:inst.OutputSize()], 1e-5)
	if err := inst.InferGathered(ctx, 2, out); err == nil {
		t.Error("InferGathered of batch 2 after a gather of batch 1")
	}

	// refused fragments
	size := uint64(4 * 2 * isz)
	for _, c := range []struct {
		what string
		f    Frag
	}{
		{"past the tensor", Frag{Src: reg.Dev, Dst: size - 4, Len: 8}},
		{"past the region", Frag{Src: reg.Dev + uint64(len(mem)) - 10, Dst: 0, Len: 20}},
		{"before the region", Frag{Src: reg.Dev - 8, Dst: 0, Len: 16}},
		{"huge", Frag{Src: reg.Dev, Dst: 8, Len: 1 << 63}},
	} {
		if err := inst.Gather(2, append(frags[:1:1], c.f)); err == nil {
			t.Errorf("fragment %s accepted", c.what)
		} else {
			t.Logf("%s: %v", c.what, err)
		}
	}
	if _, err := reg.Frag(unsafe.Pointer(&mem[len(mem)-4]), 8, 0); err == nil {
		t.Error("Region.Frag past the region's end")
	}
	if _, err := b.RegisterRegion(unsafe.Pointer(&mem[4096]), 4096); err == nil {
		t.Error("an overlapping region registered")
	}
	if _, err := b.RegisterRegion(nil, 4096); err == nil {
		t.Error("a nil region registered")
	}
	if err := b.UnregisterRegion(reg); err != nil {
		t.Fatal(err)
	}
	if err := b.UnregisterRegion(reg); err == nil {
		t.Error("a region unregistered twice")
	}
	if err := inst.Gather(2, frags); err == nil {
		t.Error("a gather from an unregistered region accepted")
	}
	// Deinit unregisters what is left (the cleanup's leak check)
	if _, err := b.RegisterRegion(unsafe.Pointer(&mem[0]), len(mem)); err != nil {
		t.Fatal(err)
	}
}

// A model without a dynamic batch dimension runs a batch as one program
// execution per request, like on the cpu backend; its gathers take one
// request.
func TestBackendFixedBatch(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	g := preemptModel(t, "squeezenet11")
	g.Inputs[0].Dims = append([]int64{1}, g.Inputs[0].Dims[1:]...)
	inst := load(t, b, "fixed", g, 2).(*Instance)
	defer inst.Close()
	if inst.Batched() {
		t.Fatal("a fixed batch of 1 reported as batched")
	}
	ref := cpuBackend(t)
	rinst := load(t, ref, "fixed", g, 2)
	defer rinst.Close()
	in := zoo.Input(13, 2*inst.InputSize())
	agree(t, "fixed batch, 2 requests", infer(t, b, inst, 2, in), infer(t, ref, rinst, 2, in), tol)
	if err := inst.Gather(2, nil); err == nil {
		t.Error("a gather of 2 requests into a model without a batch dimension")
	}
	if err := inst.Gather(1, nil); err != nil {
		t.Error(err)
	}
}
