// Package libml is sluice's inference runtime: models compiled to kernel
// sequences, backends that run them (cpu, cuda, ort), the batcher and the
// GPU-style scheduler. This file holds the backend contract, GSLICE's six
// calls.
package libml

import (
	"context"
	"unsafe"

	"sluice/libml/graph"
)

// Backend runs models. A backend is set up once with Init; models are loaded
// once with LoadModel and shared by every instance made with LinkModel.
type Backend interface {
	// Name is the backend's short name ("cpu", "cuda", "ort").
	Name() string
	// Init starts the backend (worker units, device context).
	Init(ctx context.Context, cfg BackendConfig) error
	// Deinit stops the backend; every instance and model must be closed
	// first.
	Deinit() error
	// LoadModel compiles g and loads its weights, returning the first
	// instance of the model.
	LoadModel(ctx context.Context, name string, g *graph.Graph) (Instance, error)
	// LinkModel makes another instance of an already loaded model, attached
	// to the same weights (GSLICE's parameter sharing). It adds activation
	// buffers only.
	LinkModel(ctx context.Context, base Instance) (Instance, error)
	// ConfigureBatch prepares inst for batches of up to maxBatch requests:
	// buffer plans and workspaces are sized here, not per call.
	ConfigureBatch(inst Instance, maxBatch int) error
	// InferBatch runs one batch. in holds batch inputs back to back, each
	// inst.InputSize() float32 values; out receives batch outputs, each
	// inst.OutputSize() values.
	InferBatch(ctx context.Context, inst Instance, batch int, in, out []float32) error
	// InferInput runs one batch of in.N() requests whose input is still
	// their payload, in the dataplane's packet buffers (ARCHITECTURE.md
	// §2, step 5): the backend gathers and converts in.Payload as in.Enc
	// says straight into the instance's input tensor (on the host: one
	// pass in C, one call per batch), calls in.Gathered once it no longer
	// reads the payload (and in.Loaded when the input is in place, if
	// that comes earlier), sets in.Copies, and writes the outputs into
	// out as InferBatch does.
	InferInput(ctx context.Context, inst Instance, in *Input, out []float32) error
}

// BackendConfig configures a backend.
type BackendConfig struct {
	// Units is the number of compute units (CPU worker threads, or SMs to
	// use); 0 means all available.
	Units int
	// PinUnits pins CPU worker threads to cores.
	PinUnits bool
	// ModelMemoryLimit is the most bytes of the backend's memory one
	// model may take (its weights, and at each batch size its activations
	// and constants): a larger one fails to load or to configure its
	// batch, with an error that says what it needs (engine.Options.
	// MemoryLimit). 0: no limit. Backends whose memory the engine does
	// not plan (ort) do not apply it.
	ModelMemoryLimit int64
}

// Instance is one loaded model instance: its own activation buffers, shared
// weights.
type Instance interface {
	// Model is the name the model was loaded under.
	Model() string
	// InputShape and OutputShape are the per-request shapes (batch
	// dimension excluded).
	InputShape() []int64
	OutputShape() []int64
	// InputSize and OutputSize are the per-request element counts.
	InputSize() int
	OutputSize() int
	// Close frees the instance's own buffers; weights are freed with the
	// last instance of the model.
	Close() error
}

// The interfaces below are capabilities some backends and instances have
// beyond the six calls. The layers above (IF manager, appliance) ask for
// a capability, never for a concrete backend type.

// RealTimeInstance is an instance whose backend schedules batches by
// class (a scheduling policy): SetRealTime(true) makes its batches
// real-time work that preempts best-effort work; false (the default)
// makes them best-effort.
type RealTimeInstance interface {
	Instance
	SetRealTime(rt bool)
}

// ModelBytesLoader is a backend that loads a model from the bytes of its
// ONNX file itself, without the engine's graph import (ort: ONNX Runtime,
// for models the engine cannot compile). inputShape fixes the per-request
// input shape of a model whose input dimensions are dynamic (nil: as the
// file says).
type ModelBytesLoader interface {
	LoadModelBytes(ctx context.Context, name string, onnx []byte, inputShape []int64) (Instance, error)
}

// RegionMapper is a backend whose device reads request payloads in place
// from host memory registered with it once (GSLICE §3.3.2): the
// dataplane's packet region (a DPDK port's mbuf memory). InferInput then
// gathers fragments inside a mapped region with no host copy.
type RegionMapper interface {
	// MapRegion registers n bytes of C memory at p (memory that never
	// moves and outlives the mapping). unmap undoes it; it must be called
	// before the memory is freed, and no batch may be in flight on it.
	MapRegion(p unsafe.Pointer, n int) (unmap func() error, err error)
}

// Scheduling is a backend that runs batches under a scheduling policy
// (libml/sched): its counters, for metrics.
type Scheduling interface {
	// SchedStats returns the policy's counters; ok is false before Init
	// or after Deinit.
	SchedStats() (st SchedStats, ok bool)
}

// SchedStats are a scheduling backend's cumulative counters.
type SchedStats struct {
	// Policy is the policy's name (reef, seq, conc, srpt, split); Device
	// the device its units belong to (cpu, cuda).
	Policy, Device string
	// RTJobs and BEJobs count finished jobs (batches) per class.
	RTJobs, BEJobs int64
	// Preemptions counts preemptions of running best-effort work,
	// Restores their restores, PadBlocks the best-effort blocks run as
	// padding beside real-time kernels, ModeSwitches normal → real-time
	// mode switches.
	Preemptions, Restores, PadBlocks, ModeSwitches int64
}
