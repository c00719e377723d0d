package conformance

import (
	"context"
	"os"
	"strings"
	"testing"

	"sluice/libml"
	"sluice/libml/onnx"
	"sluice/libml/ort"
)

// ortKnownFailures are node tests that ONNX Runtime 1.24 itself does not
// pass (with the data of libonnx-testdata 1.12), keyed by name prefix. They
// say nothing about libml/onnx, which TestNodeTestsORT checks: every other
// decodable node test, decoded and re-encoded by libml/onnx, must pass in
// ONNX Runtime.
var ortKnownFailures = map[string]string{
	"test_adagrad*":                                      "ai.onnx.preview.training has no ONNX Runtime kernels",
	"test_adam*":                                         "ai.onnx.preview.training has no ONNX Runtime kernels",
	"test_momentum*":                                     "ai.onnx.preview.training has no ONNX Runtime kernels",
	"test_nesterov_momentum*":                            "ai.onnx.preview.training has no ONNX Runtime kernels",
	"test_bernoulli*":                                    "random: ONNX Runtime's generator differs from numpy's",
	"test_training_dropout*":                             "random: ONNX Runtime's generator differs from numpy's",
	"test_bitshift_left_uint16":                          "no uint16 BitShift kernel in ONNX Runtime",
	"test_bitshift_right_uint16":                         "no uint16 BitShift kernel in ONNX Runtime",
	"test_max_int16":                                     "no int16 Max kernel in ONNX Runtime",
	"test_max_uint16":                                    "no uint16 Max kernel in ONNX Runtime",
	"test_min_int16":                                     "no int16 Min kernel in ONNX Runtime",
	"test_min_uint16":                                    "no uint16 Min kernel in ONNX Runtime",
	"test_pow_types_float32_uint*":                       "no Pow kernel with unsigned exponents in ONNX Runtime",
	"test_gru_batchwise":                                 "ONNX Runtime does not support layout=1 recurrences",
	"test_lstm_batchwise":                                "ONNX Runtime does not support layout=1 recurrences",
	"test_simple_rnn_batchwise":                          "ONNX Runtime does not support layout=1 recurrences",
	"test_cast_BFLOAT16_to_FLOAT":                        "test data stores bfloat16 as uint16",
	"test_cast_FLOAT_to_BFLOAT16":                        "test data stores bfloat16 as uint16",
	"test_castlike_BFLOAT16_to_FLOAT*":                   "test data stores bfloat16 as a uint16 tensor of the wrong shape",
	"test_castlike_FLOAT_to_BFLOAT16*":                   "test data stores bfloat16 as a uint16 tensor of the wrong shape",
	"test_blackmanwindow*":                               "float32 evaluation vs float64 reference: 1.5e-4 relative off",
	"test_hammingwindow*":                                "float32 evaluation vs float64 reference: 1.6e-4 relative off",
	"test_hannwindow*":                                   "float32 evaluation vs float64 reference: 2e-4 relative off",
	"test_dft*":                                          "float32 FFT: near-zero outputs off by up to 1e-4",
	"test_stft*":                                         "float32 FFT: near-zero outputs off by up to 1e-5",
	"test_gridsample_bicubic":                            "reference data rounded to 4 decimals",
	"test_roialign*":                                     "reference data rounded to 4 decimals",
	"test_maxunpool_export_with_output_shape":            "ONNX Runtime places values differently with output_shape",
	"test_resize_downsample_scales_cubic_align_corners":  "ONNX Runtime's align_corners downsampling differs from the reference",
	"test_resize_downsample_scales_linear_align_corners": "ONNX Runtime's align_corners downsampling differs from the reference",
	"test_constant":                                      "no inputs: onnxruntime_go cannot run a session without inputs",
}

func ortKnownFailure(name string) string {
	if why, ok := ortKnownFailures[name]; ok {
		return why
	}
	for key, why := range ortKnownFailures {
		if prefix, ok := strings.CutSuffix(key, "*"); ok && strings.HasPrefix(name, prefix) {
			return why
		}
	}
	return ""
}

// TestNodeTestsORT runs every node test libml/onnx can decode through
// libml/onnx's encoder and ONNX Runtime, and compares with ONNX's expected
// outputs: a check of the encoder (and of the ort backend's Session) on
// some 900 models using most of the operator set.
func TestNodeTestsORT(t *testing.T) {
	names := NodeTestNames()
	if len(names) == 0 {
		RequireDeps(t, "libonnx-testdata", os.ErrNotExist)
	}
	b := ortBackend(t)
	var pass, known, undecodable int
	for _, name := range names {
		nt, err := LoadNodeTest(name)
		if err != nil {
			if strings.Contains(err.Error(), "not supported") {
				undecodable++
				continue
			}
			t.Errorf("%v", err)
			continue
		}
		err = runORT(b, nt)
		why := ortKnownFailure(name)
		switch {
		case err == nil && why != "":
			t.Logf("%s passes although listed as a known ONNX Runtime failure (%s)", name, why)
			pass++
		case err == nil:
			pass++
		case why != "":
			known++
		default:
			t.Errorf("%s: %v", name, err)
		}
	}
	t.Logf("%d node tests pass in ONNX Runtime after a libml/onnx round trip, %d known ONNX Runtime failures, %d not decodable (sub-graphs, sequences, optionals)", pass, known, undecodable)
}

func runORT(b *ort.Backend, nt *NodeTest) error {
	data, err := onnx.EncodeModel(nt.Model)
	if err != nil {
		return err
	}
	s, err := b.NewSession(data)
	if err != nil {
		return err
	}
	defer s.Close()
	for _, ds := range nt.Sets {
		out, err := s.Run(context.Background(), ds.Inputs)
		if err != nil {
			return err
		}
		for k, want := range ds.Outputs {
			if err := Compare(out[k], want); err != nil {
				return err
			}
		}
	}
	return nil
}

// ortBackend starts an ort backend with one intra-op thread (or reports
// ONNX Runtime missing through RequireDeps).
func ortBackend(t testing.TB) *ort.Backend {
	t.Helper()
	lib, err := ort.LibraryPath()
	if err == nil {
		_, err = os.Stat(lib)
	}
	if err != nil {
		RequireDeps(t, "ONNX Runtime", err)
	}
	b := ort.New(ort.Options{IntraOpThreads: 1, NoSpin: true, Quiet: true})
	if err := b.Init(context.Background(), libml.BackendConfig{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Deinit(); err != nil {
			t.Error(err)
		}
	})
	return b
}
