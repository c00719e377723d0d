package cuda

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"sluice/libml"
)

// InferInput runs one batch whose input is still the requests' payload
// (see libml.Backend.InferInput).
func (b *Backend) InferInput(ctx context.Context, inst libml.Instance, in *libml.Input, out []float32) error {
	i, ok := inst.(*Instance)
	if !ok || i.b != b {
		return errors.New("cuda: InferInput: instance is not from this backend")
	}
	return i.InferInput(ctx, in, out)
}

// InferInput runs one batch whose input is the requests' payload. A
// payload whose fragments all lie in registered regions (a DPDK port's
// packet region, RegisterRegion) is gathered on the device:
// sg_batch_gather reads the fragments in place into the input tensor,
// converting an 8-bit image (libml.InputImageU8, up to
// MaxGatherChannels channels) to normalised floats on the way, with no
// host copy (in.Copies = 0), and the packet buffers are given back
// (in.Gathered) once the run has finished reading them. Otherwise
// (packets outside every registered region, as a kernel-socket port's
// are; an image of more channels; a model without a batch dimension at
// batch > 1) the payload is gathered and converted on the host, in C,
// into the instance's host input, given back, and run as InferBatch's:
// two host copies (that input, then the pinned upload buffer) and the
// upload. Both paths give the same bits.
func (i *Instance) InferInput(ctx context.Context, in *libml.Input, out []float32) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if err := i.inferInput(ctx, in, out); err != nil {
		return fmt.Errorf("cuda: InferInput %q: %w", i.m.name, err)
	}
	return nil
}

func (i *Instance) inferInput(ctx context.Context, in *libml.Input, out []float32) error {
	batch := in.N()
	if _, err := i.planFor(batch); err != nil {
		return err
	}
	host, err := i.gatherInput(batch, in)
	if err != nil {
		return err
	}
	if host == nil {
		err := i.inferGathered(ctx, batch, out)
		in.Gather()
		return err
	}
	in.Gather()
	return i.inferBatch(ctx, batch, host, out)
}

// deviceConverts reports whether the batch gather converts enc's
// payload on the device.
func deviceConverts(enc *libml.Encoding) bool {
	if enc.Tail > 0 { // a flow state in host memory: gathered on the host
		return false
	}
	switch enc.Format {
	case libml.InputF32:
		return true
	case libml.InputImageU8:
		return enc.Channels >= 1 && enc.Channels <= MaxGatherChannels
	}
	return false
}

// regionFrags describes in's fragments for the batch gather (into
// i.inFrags) and reports whether every one lies in a registered region
// and every request has its payload size.
func (i *Instance) regionFrags(in *libml.Input) bool {
	b := i.b
	b.mu.Lock()
	regions := b.regions
	b.mu.Unlock()
	if len(regions) == 0 {
		return false
	}
	i.inFrags = i.inFrags[:0]
	// f32: offsets in the tensor; u8: offsets in the batch's payload
	rowBytes := uint64(in.Enc.Bytes)
	var last *Region
	for r := 0; r < in.N(); r++ {
		off := uint64(0)
		for _, f := range in.Request(r) {
			if len(f) == 0 {
				continue
			}
			p := uintptr(unsafe.Pointer(unsafe.SliceData(f)))
			if last == nil || !last.holds(p, len(f)) {
				last = nil
				for _, reg := range regions {
					if reg.holds(p, len(f)) {
						last = reg
						break
					}
				}
				if last == nil {
					return false
				}
			}
			i.inFrags = append(i.inFrags, Frag{Src: last.Dev + uint64(p-uintptr(last.host)), Dst: uint64(r)*rowBytes + off, Len: uint64(len(f))})
			off += uint64(len(f))
		}
		if off != rowBytes {
			return false
		}
	}
	return true
}

// holds reports whether host bytes [p, p+n) lie inside the region.
func (r *Region) holds(p uintptr, n int) bool {
	base := uintptr(r.host)
	return p >= base && n >= 0 && uintptr(n) <= uintptr(r.size) && p-base <= uintptr(r.size)-uintptr(n)
}
