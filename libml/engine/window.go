package engine

import (
	"fmt"
	"math"

	"sluice/libml/graph"
)

// The signal operators that only make constants: the STFT windows
// (HannWindow, HammingWindow, BlackmanWindow) and MelWeightMatrix. Their
// inputs are sizes and frequencies, so the engine evaluates them at load
// time (foldOnlyOps), in float64, rounding once to the output type; an
// audio front-end then multiplies by the constant as by any weight.

// windowCoeffs are a generalised cosine window's a0, a1, a2: w[n] = a0 -
// a1 cos(2 pi n / N) + a2 cos(4 pi n / N).
var windowCoeffs = map[string][3]float64{
	"HannWindow":     {0.5, 0.5, 0},
	"HammingWindow":  {25.0 / 46.0, 21.0 / 46.0, 0},
	"BlackmanWindow": {0.42, 0.5, 0.08},
}

// scalarInt reads constant input i, a scalar integer, as what.
func scalarInt(e *ev, i int, what string) (int64, error) {
	t, err := e.constIn(i, what)
	if err != nil {
		return 0, err
	}
	if t == nil || t.Len() != 1 || t.I == nil {
		return 0, fmt.Errorf("%s (input %d) must be one integer", what, i)
	}
	return t.I[0], nil
}

// scalarFloat reads constant input i, a scalar float, as what.
func scalarFloat(e *ev, i int, what string) (float64, error) {
	t, err := e.constIn(i, what)
	if err != nil {
		return 0, err
	}
	if t == nil || t.Len() != 1 || t.F == nil {
		return 0, fmt.Errorf("%s (input %d) must be one float", what, i)
	}
	return float64(t.F[0]), nil
}

// signalOutType is a signal operator's output_datatype: a float type.
func signalOutType(e *ev) (graph.DType, error) {
	dt := graph.DType(e.n.AttrInt("output_datatype", int64(graph.Float32)))
	if !isFloatType(dt) {
		return 0, fmt.Errorf("output_datatype %d: the engine makes float windows only", dt)
	}
	return dt, nil
}

// refWindow is HannWindow, HammingWindow and BlackmanWindow: size points
// of the window of period size (periodic = 1, the default) or size - 1
// (periodic = 0, symmetric). A symmetric window of one point is [1], as
// NumPy, SciPy and PyTorch make it (the formula's 0/0; ONNX Runtime gives
// NaN).
func refWindow(e *ev) ([]*Tensor, error) {
	size, err := scalarInt(e, 0, "size")
	if err != nil {
		return nil, err
	}
	if err := checkValueShaped([]int64{size}, true); err != nil {
		return nil, fmt.Errorf("size %d: %w", size, err)
	}
	dt, err := signalOutType(e)
	if err != nil {
		return nil, err
	}
	a := windowCoeffs[e.n.Op]
	period := float64(size)
	if e.n.AttrInt("periodic", 1) == 0 {
		period = float64(size - 1)
	}
	y := &Tensor{DType: dt, Shape: []int64{size}, F: make([]float32, size)}
	for n := range y.F {
		x := 2 * math.Pi * float64(n) / period
		y.F[n] = float32(a[0] - a[1]*math.Cos(x) + a[2]*math.Cos(2*x))
	}
	if period == 0 {
		y.F[0] = 1
	}
	return one(y)
}

// refMelWeightMatrix is MelWeightMatrix: [dft_length/2 + 1, num_mel_bins]
// triangular filters, peak 1, spaced evenly on the mel scale mel(f) = 2595
// log10(1 + f/700) over [lower_edge_hertz, upper_edge_hertz], their edges
// at spectrogram bins floor((dft_length + 1) f / sample_rate) (the
// operator's reference: the step is the mel range over num_mel_bins + 2).
func refMelWeightMatrix(e *ev) ([]*Tensor, error) {
	var ints [3]int64
	for i, what := range []string{"num_mel_bins", "dft_length", "sample_rate"} {
		v, err := scalarInt(e, i, what)
		if err != nil {
			return nil, err
		}
		ints[i] = v
	}
	lo, err := scalarFloat(e, 3, "lower_edge_hertz")
	if err != nil {
		return nil, err
	}
	hi, err := scalarFloat(e, 4, "upper_edge_hertz")
	if err != nil {
		return nil, err
	}
	dt, err := signalOutType(e)
	if err != nil {
		return nil, err
	}
	mels, dftLen, rate := ints[0], ints[1], ints[2]
	bins := dftLen/2 + 1
	switch {
	case mels < 1 || dftLen < 1 || rate < 1:
		return nil, fmt.Errorf("num_mel_bins %d, dft_length %d, sample_rate %d: each must be positive", mels, dftLen, rate)
	case !(lo >= 0 && lo < hi):
		return nil, fmt.Errorf("edges %g to %g Hz: want 0 <= lower < upper", lo, hi)
	}
	if err := checkValueShaped([]int64{bins, mels}, true); err != nil {
		return nil, err
	}
	mel := func(f float64) float64 { return 2595 * math.Log10(1+f/700) }
	lowMel, highMel := mel(lo), mel(hi)
	step := (highMel - lowMel) / float64(mels+2)
	edge := make([]int64, mels+2)
	for i := range edge {
		hz := 700 * (math.Pow(10, (float64(i)*step+lowMel)/2595) - 1)
		edge[i] = int64(math.Floor(float64(dftLen+1) * hz / float64(rate)))
		// every bin a filter writes (the last one's right edge is not)
		if last := bins - 1 + int64(i/(len(edge)-1)); edge[i] < 0 || edge[i] > last {
			return nil, fmt.Errorf("a filter edge at bin %d, outside the %d bins: [%g, %g] Hz is not inside what dft_length %d at sample_rate %d resolves", edge[i], bins, lo, hi, dftLen, rate)
		}
	}
	y := &Tensor{DType: dt, Shape: []int64{bins, mels}, F: make([]float32, bins*mels)}
	for i := range mels {
		left, center, right := edge[i], edge[i+1], edge[i+2]
		if center == left {
			y.F[center*mels+i] = 1
		} else {
			for j := left; j <= center; j++ {
				y.F[j*mels+i] = float32(float64(j-left) / float64(center-left))
			}
		}
		for j := center; j < right; j++ {
			y.F[j*mels+i] = float32(float64(right-j) / float64(right-center))
		}
	}
	return one(y)
}
