package cpu

/*
#include "sluice_cpu.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// Payload formats of IngestSpec, as in sluice_cpu.h's enum sk_in_fmt.
const (
	// IngestF32 payloads are the float32 input itself, little-endian.
	IngestF32 = int32(C.SK_IN_F32)
	// IngestU8HWC payloads are u8 HWC images, converted to float32 CHW
	// with a per-channel scale and bias.
	IngestU8HWC = int32(C.SK_IN_U8_HWC)
)

// IngestSpec says how a request's payload becomes its input rows.
type IngestSpec struct {
	// Format is IngestF32 or IngestU8HWC.
	Format int32
	// Elems is the float count of one request's input.
	Elems int
	// Channels, Scale and Bias are the image's channel count and, per
	// channel, the map x → float32(x)*Scale[c] + Bias[c] (IngestU8HWC).
	Channels    int
	Scale, Bias []float32
	// Tail is how many of Elems follow an IngestU8HWC image as float32
	// values in the request's fragments (a stateful stream's state),
	// copied after the image's planes.
	Tail int
}

// Ingester gathers and converts batches of request payloads into input
// tensors with sk_ingest: one cgo call per batch, whatever the number of
// requests and fragments. It keeps its fragment descriptors from batch to
// batch, so a batch allocates nothing once the largest has been seen. One
// Ingester per caller: it is not safe for concurrent use.
type Ingester struct {
	frags []C.sk_frag
	ends  []C.int64_t
}

// Ingest writes len(ends) requests into dst, spec.Elems floats each, back
// to back. Request r is made of the fragments
// payload[ends[r-1]-base:ends[r]-base] (ends[-1] = base) in payload order,
// and a fragment may end anywhere: base lets a caller pass the requests
// of a batch from the r-th on with the batch's fragment indices. dst
// may be C memory (an instance's arena) or Go memory. The payload may be
// Go memory too (a kernel-socket port's slab): C receives its addresses
// as integers and reads them during the call only, while payload keeps
// the memory alive (Go's heap does not move). Nothing is written when a
// request's fragments do not add up to its payload size.
func (g *Ingester) Ingest(dst []float32, spec *IngestSpec, payload [][]byte, ends []int, base int) error {
	n := len(ends)
	if n == 0 {
		return nil
	}
	if spec.Elems < 1 || len(dst) < n*spec.Elems {
		return fmt.Errorf("cpu: ingest: %d floats for %d requests of %d", len(dst), n, spec.Elems)
	}
	var scale, bias *C.float
	if spec.Format == IngestU8HWC {
		if spec.Channels < 1 || len(spec.Scale) < spec.Channels || len(spec.Bias) < spec.Channels {
			return fmt.Errorf("cpu: ingest: %d channels with %d scales and %d biases", spec.Channels, len(spec.Scale), len(spec.Bias))
		}
		scale, bias = (*C.float)(&spec.Scale[0]), (*C.float)(&spec.Bias[0])
	}
	last := ends[n-1] - base
	if last < 0 || last > len(payload) {
		return fmt.Errorf("cpu: ingest: requests end at fragment %d of %d", last, len(payload))
	}
	g.frags = g.frags[:0]
	for _, f := range payload[:last] {
		g.frags = append(g.frags, C.sk_frag{p: C.uintptr_t(uintptr(unsafe.Pointer(unsafe.SliceData(f)))), n: C.int64_t(len(f))})
	}
	g.ends = g.ends[:0]
	for _, e := range ends {
		g.ends = append(g.ends, C.int64_t(e-base))
	}
	var frags *C.sk_frag
	if len(g.frags) > 0 {
		frags = &g.frags[0]
	}
	rc := C.sk_ingest((*C.float)(&dst[0]), C.int32_t(spec.Format), C.int64_t(spec.Elems), C.int64_t(spec.Channels),
		C.int64_t(spec.Tail), scale, bias, frags, &g.ends[0], C.int64_t(n))
	runtime.KeepAlive(payload)
	switch {
	case rc == 0:
		return nil
	case rc == C.SK_IN_EBAD:
		return errors.New("cpu: ingest: bad arguments (format, sizes or fragment list)")
	default:
		return fmt.Errorf("cpu: ingest: request %d: its fragments do not add up to its payload size", -1-int64(rc))
	}
}
