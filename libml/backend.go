// Package libml is sluice's inference runtime: models compiled to kernel
// sequences, backends that run them (cpu, cuda, ort), the batcher and the
// GPU-style scheduler. This file holds the backend contract, GSLICE's six
// calls.
package libml

import (
	"context"

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
	// reads the payload, sets in.Copies, and writes the outputs into out
	// as InferBatch does.
	InferInput(ctx context.Context, inst Instance, in *Input, out []float32) error
}

// BackendConfig configures a backend.
type BackendConfig struct {
	// Units is the number of compute units (CPU worker threads, or SMs to
	// use); 0 means all available.
	Units int
	// PinUnits pins CPU worker threads to cores.
	PinUnits bool
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
