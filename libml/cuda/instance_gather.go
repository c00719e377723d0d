package cuda

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"sluice/libml"
)

// The zero-copy input path (ARCHITECTURE.md §2 step 5, §4; GSLICE
// §3.3.2). The dataplane keeps each request as pointers to fragment
// payloads in its packet region. The region is registered with the
// driver once (RegisterRegion: cuMemHostRegister, mapped), so the GPU
// reads it over the bus; per batch, GatherBatch queues sg_batch_gather,
// which copies every fragment, by pointer, into the instance's input
// tensor, and InferGathered runs the model on it. No CPU copy and no
// staging buffer: the host only writes the fragment descriptors.
//
// InferInput (instance_input.go) takes this path by itself for f32
// payloads whose fragments all lie in registered regions. By hand:
//
//	reg, err := be.RegisterRegion(pool.Base(), pool.Size()) // once, after Init
//	...
//	var frags []cuda.Frag // per batch: request r's fragment of n bytes at p,
//	                      // byte off of the request's input
//	f, err := reg.Frag(p, n, uint64(4*r*inst.InputSize())+off)
//	frags = append(frags, f)
//	err = be.GatherBatch(inst, batch, frags)
//	err = be.InferGathered(ctx, inst, batch, out)
//	// the batch's packet buffers may be released now
//
// The appliance does not register its DPDK ports' packet regions yet, so
// its cuda IFs gather on the host (InferInput's other path).
//
// Packet buffers must stay untouched until InferGathered returns (the
// gather runs on the instance's stream before the model's kernels).

// Region is host memory registered with the device: the dataplane's
// packet region.
type Region struct {
	host unsafe.Pointer
	size int
	// Dev is the region's device address.
	Dev uint64
}

// Size is the region's length in bytes.
func (r *Region) Size() int { return r.size }

// Frag describes n bytes at p (inside the region) going to byte offset
// dst of the batch tensor. It fails when [p, p+n) leaves the region.
func (r *Region) Frag(p unsafe.Pointer, n int, dst uint64) (Frag, error) {
	off := uintptr(p) - uintptr(r.host)
	if uintptr(p) < uintptr(r.host) || n < 0 || off+uintptr(n) > uintptr(r.size) {
		return Frag{}, fmt.Errorf("cuda: fragment of %d bytes at %p outside the registered region [%p, +%d)", n, p, r.host, r.size)
	}
	return Frag{Src: r.Dev + uint64(off), Dst: dst, Len: uint64(n)}, nil
}

// contains reports whether device addresses [src, src+n) lie inside the
// region.
func (r *Region) contains(src, n uint64) bool {
	return src >= r.Dev && n <= uint64(r.size) && src-r.Dev <= uint64(r.size)-n
}

// RegisterRegion pins and maps n bytes of C memory at p (the dataplane's
// packet region: mmap'd, hugepages or not; not Go memory) with
// cuMemHostRegister, so that the batch gather reads fragment payloads
// straight from it. Regions are unregistered by UnregisterRegion or
// Deinit.
func (b *Backend) RegisterRegion(p unsafe.Pointer, n int) (*Region, error) {
	if p == nil || n <= 0 {
		return nil, fmt.Errorf("cuda: RegisterRegion: %d bytes at %p", n, p)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.ready(); err != nil {
		return nil, err
	}
	for _, r := range b.regions {
		if uintptr(p) < uintptr(r.host)+uintptr(r.size) && uintptr(r.host) < uintptr(p)+uintptr(n) {
			return nil, fmt.Errorf("cuda: RegisterRegion: [%p, +%d) overlaps a registered region", p, n)
		}
	}
	dev, err := b.dev.RegisterHost(p, n)
	if err != nil {
		return nil, fmt.Errorf("cuda: RegisterRegion: %w", err)
	}
	r := &Region{host: p, size: n, Dev: dev}
	b.regions = append(b.regions, r)
	return r, nil
}

// MapRegion is RegisterRegion for the layers above (libml.RegionMapper).
func (b *Backend) MapRegion(p unsafe.Pointer, n int) (func() error, error) {
	r, err := b.RegisterRegion(p, n)
	if err != nil {
		return nil, err
	}
	return func() error { return b.UnregisterRegion(r) }, nil
}

var _ libml.RegionMapper = (*Backend)(nil)

// UnregisterRegion undoes RegisterRegion. No gather may be under way on
// the region.
func (b *Backend) UnregisterRegion(r *Region) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.ready(); err != nil {
		return err
	}
	for k, x := range b.regions {
		if x == r {
			b.regions = append(b.regions[:k], b.regions[k+1:]...)
			if err := b.dev.UnregisterHost(r.host); err != nil {
				return fmt.Errorf("cuda: UnregisterRegion: %w", err)
			}
			return nil
		}
	}
	return errors.New("cuda: UnregisterRegion: region not registered")
}

// inRegion reports whether [src, src+n) lies in a registered region.
func (b *Backend) inRegion(src, n uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.regions {
		if r.contains(src, n) {
			return true
		}
	}
	return false
}

// GatherBatch queues the batch gather of frags into inst's input tensor
// for a batch of batch requests (see Instance.Gather).
func (b *Backend) GatherBatch(inst libml.Instance, batch int, frags []Frag) error {
	i, ok := inst.(*Instance)
	if !ok || i.b != b {
		return errors.New("cuda: GatherBatch: instance is not from this backend")
	}
	return i.Gather(batch, frags)
}

// InferGathered runs a batch on the input GatherBatch built (see
// Instance.InferGathered).
func (b *Backend) InferGathered(ctx context.Context, inst libml.Instance, batch int, out []float32) error {
	i, ok := inst.(*Instance)
	if !ok || i.b != b {
		return errors.New("cuda: InferGathered: instance is not from this backend")
	}
	return i.InferGathered(ctx, batch, out)
}

// gatherPerBlock is how many fragments one block of the gather copies.
const gatherPerBlock = 1

// Gather queues sg_batch_gather on the instance's stream: each fragment's
// Len bytes from Src (a device address inside a registered region) to
// byte Dst of the batch's input tensor (request r's input starts at byte
// 4*r*InputSize()). Bytes no fragment covers keep their old contents.
// Every fragment is checked against the registered regions and the
// tensor's size first: a bad one is an error and nothing is queued.
func (i *Instance) Gather(batch int, frags []Frag) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if err := i.gather(batch, frags, nil); err != nil {
		return fmt.Errorf("cuda: Gather %q: %w", i.m.name, err)
	}
	return nil
}

// gather queues the batch gather of frags; conv, when an InputImageU8
// encoding, converts on the device (PlanBatchGatherConv: each fragment's
// Dst is then an offset in the batch's payload bytes).
func (i *Instance) gather(batch int, frags []Frag, conv *libml.Encoding) error {
	p, err := i.planFor(batch)
	if err != nil {
		return err
	}
	if err := i.singleIO(p.pr.p); err != nil {
		return err
	}
	if !i.m.batched && batch != 1 {
		return fmt.Errorf("the model has no batch dimension: gather one request at a time (batch %d)", batch)
	}
	size, what := uint64(4*batch*i.InputSize()), "batch tensor"
	if conv != nil && conv.Format == libml.InputImageU8 {
		if conv.Elems != i.InputSize() {
			return fmt.Errorf("an encoding of %d values per request for a model input of %d", conv.Elems, i.InputSize())
		}
		size, what = uint64(batch*conv.Bytes), "batch payload"
	}
	for k, f := range frags {
		if f.Len > size || f.Dst > size-f.Len {
			return fmt.Errorf("fragment %d: bytes [%d, %d) outside the %d-byte %s", k, f.Dst, f.Dst+f.Len, size, what)
		}
		if f.Len > 0 && !i.b.inRegion(f.Src, f.Len) {
			return fmt.Errorf("fragment %d: source %#x (+%d) outside every registered region", k, f.Src, f.Len)
		}
	}
	s := i.ln.s
	if i.gathered != 0 {
		// the descriptors of the last gather may still be read
		if err := s.Sync(); err != nil {
			return err
		}
	}
	i.gathered = 0
	need := len(frags) * FragSize
	if need > i.descN {
		if i.desc != nil {
			i.desc.Free()
			i.desc, i.descN = nil, 0
		}
		n := max(need, 64*FragSize)
		if i.desc, err = i.b.dev.HostAlloc(n); err != nil {
			return fmt.Errorf("descriptors: %w", err)
		}
		i.descN = n
	}
	var a Args
	a.Out = i.arena + 4*uint64(p.pr.p.Inputs[0].Off)
	if len(frags) > 0 {
		i.descEnc = appendFrags(i.descEnc[:0], frags)
		i.desc.Put(0, i.descEnc)
		a.Aux = i.desc.Dev()
	}
	l, err := PlanBatchGatherConv(&a, len(frags), gatherPerBlock, conv)
	if err != nil {
		return err
	}
	// a clear flag: a cancelled run may have left it set
	if err := s.WriteAsync(i.state, i.stage, stageReset, 16); err != nil {
		return err
	}
	if l.Grid > 0 {
		if err := s.Launch(l.Kernel, l.Grid, Pack(i.state, -1, &a)); err != nil {
			return err
		}
	}
	i.gathered = batch
	return nil
}

// InferGathered runs a batch on the input the last Gather of this batch
// size queued, and copies the outputs into out (batch outputs back to
// back). Each Gather feeds one InferGathered.
func (i *Instance) InferGathered(ctx context.Context, batch int, out []float32) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if err := i.inferGathered(ctx, batch, out); err != nil {
		return fmt.Errorf("cuda: InferGathered %q: %w", i.m.name, err)
	}
	return nil
}

func (i *Instance) inferGathered(ctx context.Context, batch int, out []float32) error {
	p, err := i.planFor(batch)
	if err != nil {
		return err
	}
	if i.gathered != batch {
		return fmt.Errorf("no gathered input for a batch of %d (Gather first)", batch)
	}
	i.gathered = 0
	osz := i.OutputSize()
	if len(out) < batch*osz {
		return fmt.Errorf("batch %d needs %d outputs, got %d", batch, batch*osz, len(out))
	}
	ob := p.pr.p.Outputs[0]
	if err := i.runAll(ctx, p, &readBack{off: i.outOff, src: ob.Off, n: 4 * batch * osz}); err != nil {
		return err
	}
	i.stage.Get(i.outOff, f32view(out[:batch*osz]))
	return nil
}
