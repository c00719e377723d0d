package ort

import (
	"context"
	"fmt"

	ortgo "github.com/yalue/onnxruntime_go"

	"sluice/libml"
	"sluice/libml/graph"
	"sluice/libml/onnx"
)

// Session runs an ONNX model on whole named tensors, any number of inputs
// and outputs of most element types: the reference oracle the conformance
// tests compare libml's engine against. It sits beside the backend's
// one-input, one-output instances and shares the backend's thread
// settings.
type Session struct {
	b       *Backend
	sess    *ortgo.DynamicAdvancedSession
	inputs  []graph.ValueInfo
	outputs []graph.ValueInfo
}

// NewSession loads a serialized ONNX model for Run.
func (b *Backend) NewSession(data []byte) (*Session, error) {
	inputs, outputs, err := onnx.DecodeSignature(data)
	if err != nil {
		return nil, fmt.Errorf("ort: session: %w", err)
	}
	if len(outputs) == 0 {
		return nil, fmt.Errorf("ort: session: model has no outputs")
	}
	if len(inputs) == 0 {
		// onnxruntime_go cannot run a session without inputs.
		return nil, fmt.Errorf("ort: session: models without inputs are not supported")
	}
	if err := b.addOpen(1); err != nil {
		return nil, err
	}
	so, err := b.sessionOptions()
	if err != nil {
		b.addOpen(-1)
		return nil, fmt.Errorf("ort: session: %w", err)
	}
	defer so.Destroy()
	in := make([]string, len(inputs))
	for i, vi := range inputs {
		in[i] = vi.Name
	}
	out := make([]string, len(outputs))
	for i, vi := range outputs {
		out[i] = vi.Name
	}
	sess, err := ortgo.NewDynamicAdvancedSessionWithONNXData(data, in, out, so)
	if err != nil {
		b.addOpen(-1)
		return nil, fmt.Errorf("ort: session: %w", err)
	}
	return &Session{b: b, sess: sess, inputs: inputs, outputs: outputs}, nil
}

// Inputs describes the model's inputs (initializers excluded).
func (s *Session) Inputs() []graph.ValueInfo { return s.inputs }

// Outputs describes the model's outputs.
func (s *Session) Outputs() []graph.ValueInfo { return s.outputs }

// Run feeds inputs, matched to the model's inputs by Tensor.Name (each
// converted to the element type the model declares), and returns every
// output in the model's order, named.
func (s *Session) Run(ctx context.Context, inputs []*graph.Tensor) ([]*graph.Tensor, error) {
	byName := make(map[string]*graph.Tensor, len(inputs))
	for _, t := range inputs {
		byName[t.Name] = t
	}
	ins := make([]ortgo.Value, len(s.inputs))
	defer func() {
		for _, v := range ins {
			if v != nil {
				v.Destroy()
			}
		}
	}()
	for k, vi := range s.inputs {
		t := byName[vi.Name]
		if t == nil {
			return nil, fmt.Errorf("ort: run: no tensor for input %q", vi.Name)
		}
		v, err := newValue(t, vi.DType)
		if err != nil {
			return nil, fmt.Errorf("ort: run: input %q: %w", vi.Name, err)
		}
		ins[k] = v
	}
	// Outputs of fully static shape are allocated here (onnxruntime_go
	// cannot take over scalars or half floats); ONNX Runtime allocates the
	// rest.
	outs := make([]ortgo.Value, len(s.outputs))
	defer func() {
		for _, v := range outs {
			if v != nil {
				v.Destroy()
			}
		}
	}()
	for k, vi := range s.outputs {
		if staticShape(vi.Dims) && (libml.Elems(vi.Dims) > 0 || len(vi.Dims) == 0) {
			if v, err := newEmptyValue(vi.DType, vi.Dims); err == nil {
				outs[k] = v
			}
		}
	}
	ro, err := ortgo.NewRunOptions()
	if err != nil {
		return nil, fmt.Errorf("ort: run options: %w", err)
	}
	defer ro.Destroy()
	stop := context.AfterFunc(ctx, func() { ro.Terminate() })
	defer stop()
	if err := s.sess.RunWithOptions(ins, outs, ro); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ort: run: %w", ctx.Err())
		}
		return nil, fmt.Errorf("ort: run: %w", err)
	}
	res := make([]*graph.Tensor, len(outs))
	for k, v := range outs {
		t, err := toTensor(s.outputs[k].Name, v)
		if err != nil {
			return nil, fmt.Errorf("ort: run: %w", err)
		}
		res[k] = t
	}
	return res, nil
}

// Close frees the session.
func (s *Session) Close() error {
	if s.sess == nil {
		return fmt.Errorf("ort: session already closed")
	}
	err := s.sess.Destroy()
	s.sess = nil
	s.b.addOpen(-1)
	if err != nil {
		return fmt.Errorf("ort: close session: %w", err)
	}
	return nil
}

func staticShape(dims []int64) bool {
	if dims == nil {
		return false
	}
	for _, d := range dims {
		if d < 0 {
			return false
		}
	}
	return true
}
