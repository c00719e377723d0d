package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/onnx"
	"sluice/libml/zoo"
)

// The `$ quantize` examples of docs/profiles.md run as written (the output
// file in a temporary directory) and print what the page shows; the model
// they write loads on the cpu backend at the page's max_batch and runs.
func TestDocExamples(t *testing.T) {
	b, err := os.ReadFile("../../docs/profiles.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	ran := 0
	for i, line := range lines {
		cmd, ok := strings.CutPrefix(line, "$ quantize ")
		if !ok {
			continue
		}
		args := strings.Fields(cmd)
		opt := map[string]string{}
		for j := 0; j+1 < len(args); j += 2 {
			opt[strings.TrimPrefix(args[j], "-")] = args[j+1]
		}
		out := filepath.Join(t.TempDir(), opt["out"])
		random := 0
		for _, c := range opt["random"] {
			random = random*10 + int(c-'0')
		}
		stdout := captureStdout(t, func() {
			if err := run(opt["in"], opt["zoo"], out, opt["calib"], random, 2); err != nil {
				t.Fatalf("docs/profiles.md:%d: %v", i+1, err)
			}
		})
		want := strings.TrimSpace(lines[i+1])
		if got := strings.TrimSpace(strings.ReplaceAll(stdout, filepath.Dir(out)+"/", "")); got != want {
			t.Errorf("docs/profiles.md:%d prints\n%s\nthe page shows\n%s", i+2, got, want)
		}
		g, err := onnx.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		be := cpu.New()
		ctx := context.Background()
		if err := be.Init(ctx, libml.BackendConfig{Units: 2}); err != nil {
			t.Fatal(err)
		}
		inst, err := be.LoadModel(ctx, "q", g)
		if err != nil {
			t.Fatal(err)
		}
		if err := be.ConfigureBatch(inst, 8); err != nil {
			t.Fatal(err)
		}
		res := make([]float32, 2*inst.OutputSize())
		if err := be.InferBatch(ctx, inst, 2, zoo.Input(5, 2*inst.InputSize()), res); err != nil {
			t.Fatal(err)
		}
		inst.Close()
		if err := be.Deinit(); err != nil {
			t.Fatal(err)
		}
		ran++
	}
	if ran == 0 {
		t.Fatal("no `$ quantize` example in docs/profiles.md")
	}
}

func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		var sb strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
		done <- sb.String()
	}()
	defer func() { os.Stdout = old }()
	f()
	w.Close()
	os.Stdout = old
	return <-done
}
