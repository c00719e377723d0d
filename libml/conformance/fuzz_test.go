package conformance

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"sluice/libml/engine"
	"sluice/libml/onnx"
)

// FuzzCompile: whatever ONNX file decodes, the engine loads and compiles
// for batches of one and three or refuses with an error; it never faults (a panic,
// which Load and CompileBatch return as an *engine.InternalError). An
// operator's model reaches the loader from a profile or a control
// command, so a model must not be able to take the appliance down. Seeds:
// every node-test model of libonnx-testdata (make fuzz mutates them; go
// test replays the seeds and testdata/fuzz/FuzzCompile).
func FuzzCompile(f *testing.F) {
	for _, name := range NodeTestNames() {
		if b, err := os.ReadFile(filepath.Join(NodeTestDir, name, "model.onnx")); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := onnx.DecodeModel(b)
		if err != nil {
			return
		}
		fault := func(err error) {
			var ie *engine.InternalError
			if errors.As(err, &ie) {
				t.Fatalf("%v\n%s", ie, ie.Stack)
			}
		}
		// the cpu device's options, and the other branches: no Winograd,
		// panels, fused pointwise-depthwise or byte storage (the cuda
		// device's), no fusion, no in-place kernels
		for _, opt := range []engine.Options{{Units: 2},
			{Units: 2, NoWinograd: true, NoPanels: true, NoPointwiseDW: true, NoByteIntegers: true, NoFusion: true, NoInPlace: true}} {
			em, err := engine.Load(m.Graph, opt)
			if err != nil {
				fault(err)
				continue
			}
			for _, batch := range []int{1, 3} {
				_, err = em.CompileBatch(batch)
				fault(err)
			}
		}
	})
}
