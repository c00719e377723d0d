package cpu

import (
	"sluice/libml"
	ncpu "sluice/native/cpu"
)

// Ingester gathers and converts a libml.Input's requests into an input
// tensor in one pass in C (native/cpu's sk_ingest, one cgo call per call
// whatever the number of requests and fragments): the request's one copy,
// packet buffer → tensor. Every backend that runs on host memory (cpu,
// the scheduler's, ort, cuda when it cannot read the packets in place)
// uses it. It keeps its descriptors from call to call: one per instance,
// not safe for concurrent use.
type Ingester struct {
	g ncpu.Ingester
}

// Ingest writes requests r0..r1-1 of in into dst, in.Enc.Elems floats
// each, back to back.
func (x *Ingester) Ingest(dst []float32, in *libml.Input, r0, r1 int) error {
	e := in.Enc
	spec := ncpu.IngestSpec{Format: ncpu.IngestF32, Elems: e.Elems, Tail: e.Tail}
	if e.Format == libml.InputImageU8 {
		spec.Format, spec.Channels, spec.Scale, spec.Bias = ncpu.IngestU8HWC, e.Channels, e.Scale, e.Bias
	}
	base := 0
	if r0 > 0 {
		base = in.Ends[r0-1]
	}
	return x.g.Ingest(dst, &spec, in.Payload[base:], in.Ends[r0:r1], base)
}
