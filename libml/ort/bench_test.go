package ort

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"sluice/libml"
	"sluice/libml/onnx"
)

// BenchmarkOCR measures ONNX Runtime on PaddleOCR's classifier (3×48×192)
// and detector (3×320×320) per batch size and intra-op thread count:
//
//	go test -run - -bench OCR ./libml/ort/
//
// ns/op is one InferBatch; req/s is requests per second.
func BenchmarkOCR(b *testing.B) {
	lib := needLib(b)
	dir, err := onnx.ModelsDir()
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		file    string
		shape   []int64
		batches []int
	}{
		{"ch_ppocr_mobile_v2.0_cls_infer.onnx", []int64{3, 48, 192}, []int{1, 8}},
		{"ch_PP-OCRv4_det_infer.onnx", []int64{3, 320, 320}, []int{1}},
	}
	for _, threads := range []int{1, 2} {
		be := New(Options{LibraryPath: lib, IntraOpThreads: threads})
		if err := be.Init(context.Background(), libml.BackendConfig{}); err != nil {
			b.Fatal(err)
		}
		for _, c := range cases {
			data, err := os.ReadFile(filepath.Join(dir, c.file))
			if err != nil {
				be.Deinit()
				b.Skipf("model not available (run `make deps`): %v", err)
			}
			inst, err := be.LoadONNX(context.Background(), c.file, data, ModelOptions{InputShape: c.shape})
			if err != nil {
				b.Fatal(err)
			}
			for _, batch := range c.batches {
				name := fmt.Sprintf("%s/threads=%d/batch=%d", c.file[:len(c.file)-5], threads, batch)
				b.Run(name, func(b *testing.B) {
					if err := be.ConfigureBatch(inst, batch); err != nil {
						b.Fatal(err)
					}
					in := make([]float32, batch*inst.InputSize())
					for i := range in {
						in[i] = float32(i%255)/127.5 - 1
					}
					out := make([]float32, batch*inst.OutputSize())
					b.ResetTimer()
					for b.Loop() {
						if err := be.InferBatch(context.Background(), inst, batch, in, out); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "req/s")
				})
			}
			inst.Close()
		}
		if err := be.Deinit(); err != nil {
			b.Fatal(err)
		}
	}
}
