package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/cuda"
	"sluice/libml/cuda/cudrv"
	"sluice/libml/kprof"
	"sluice/libml/onnx"
)

func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	if errb.Len() > 0 {
		t.Logf("stderr: %s", errb.String())
	}
	return out.String(), err
}

// .npy files round trip, and their headers are what NumPy writes: the
// header padded so the data starts at a multiple of 64.
func TestNpy(t *testing.T) {
	dir := t.TempDir()
	for _, shape := range [][]int64{{5}, {2, 3}, {1, 3, 2, 2}} {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(i)*0.5 - 1
		}
		p := filepath.Join(dir, "a.npy")
		if err := writeNpy(p, shape, v); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		if hl := int(b[8]) | int(b[9])<<8; (10+hl)%64 != 0 || b[10+hl-1] != '\n' {
			t.Errorf("shape %v: header of %d bytes", shape, hl)
		}
		gs, gv, err := readNpy(p)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(gs, shape) || !slices.Equal(gv, v) {
			t.Errorf("shape %v: read back %v %v", shape, gs, gv)
		}
	}
	if err := writeNpy(filepath.Join(dir, "b.npy"), []int64{2, 2}, make([]float32, 3)); err == nil {
		t.Error("a shape that does not match the data was written")
	}
}

// export on the cpu backend: the ONNX files decode to the zoo graphs
// (same outputs when run again), and the .npy outputs are the backend's
// outputs for the .npy inputs.
func TestExportCPU(t *testing.T) {
	dir := t.TempDir()
	out, err := runCmd(t, "export", "-dir", dir, "-backend", "cpu", "-small", "-models", "squeezenet11,bert", "-batch", "1,3")
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out)
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var man Manifest
	if err := json.Unmarshal(b, &man); err != nil {
		t.Fatal(err)
	}
	if man.Backend != "cpu" || len(man.Entries) != 4 {
		t.Fatalf("manifest: %+v", man)
	}
	be := cpu.New()
	if err := be.Init(context.Background(), libml.BackendConfig{}); err != nil {
		t.Fatal(err)
	}
	defer be.Deinit()
	for _, e := range man.Entries {
		g, err := onnx.ReadFile(filepath.Join(dir, e.ONNX))
		if err != nil {
			t.Fatal(err)
		}
		ins, in, err := readNpy(filepath.Join(dir, e.Input))
		if err != nil {
			t.Fatal(err)
		}
		outs, want, err := readNpy(filepath.Join(dir, e.Output))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ins, e.InShape) || !slices.Equal(outs, e.OutShape) || ins[0] != int64(e.Batch) {
			t.Errorf("%s batch %d: shapes %v %v, manifest %v %v", e.Model, e.Batch, ins, outs, e.InShape, e.OutShape)
		}
		inst, err := be.LoadModel(context.Background(), e.Model, g)
		if err != nil {
			t.Fatal(err)
		}
		if err := be.ConfigureBatch(inst, e.Batch); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(want))
		if err := be.InferBatch(context.Background(), inst, e.Batch, in, got); err != nil {
			t.Fatal(err)
		}
		inst.Close()
		for i := range want {
			if d := got[i] - want[i]; d > 1e-4 || d < -1e-4 {
				t.Fatalf("%s batch %d: output %d: decoded ONNX gives %g, the export wrote %g", e.Model, e.Batch, i, got[i], want[i])
			}
		}
	}
}

// python3 with numpy, if this machine has one (the GPU machine does).
func python(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("PYTHON"), "python3", "/usr/bin/python3"} {
		if p == "" {
			continue
		}
		if exec.Command(p, "-c", "import numpy").Run() == nil {
			return p
		}
	}
	t.Skip("no python3 with numpy here")
	return ""
}

// torchref.py: its self-test (protobuf decoder, numpy interpreter), then
// check on an export: the numpy interpreter of the ONNX files agrees with
// our outputs within 1e-3, and a corrupted output fails the check.
func TestTorchref(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	cmd := exec.Command(py, "torchref.py", "selftest", "--tmp", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("selftest: %v\n%s", err, out)
	} else if !strings.Contains(string(out), "6 passed, 0 failed") {
		t.Fatalf("selftest:\n%s", out)
	}
	if _, err := runCmd(t, "export", "-dir", dir, "-backend", "cpu", "-small", "-models", "squeezenet11,mobilenetv2,bert", "-batch", "1,2"); err != nil {
		t.Fatal(err)
	}
	check := func() (string, error) {
		out, err := exec.Command(py, "torchref.py", "check", "--dir", dir, "--engine", "numpy").CombinedOutput()
		return string(out), err
	}
	out, err := check()
	t.Log(out)
	if err != nil || !strings.Contains(out, "6 passed, 0 failed") {
		t.Fatalf("check: %v", err)
	}
	if exec.Command(py, "-c", "import torch").Run() == nil {
		// the torch interpreter (what speed times) on the CPU
		out, err := exec.Command(py, "torchref.py", "check", "--dir", dir, "--engine", "torch").CombinedOutput()
		t.Logf("%s", out)
		if err != nil || !strings.Contains(string(out), "reference: torch (cpu)") || !strings.Contains(string(out), "6 passed, 0 failed") {
			t.Fatalf("check --engine torch: %v", err)
		}
		lat := filepath.Join(dir, "lat.json")
		if _, err := runCmd(t, "latency", "-backend", "cpu", "-small", "-models", "bert", "-batch", "1,2", "-n", "3", "-json", lat); err != nil {
			t.Fatal(err)
		}
		sj := filepath.Join(dir, "speed.json")
		out, err = exec.Command(py, "torchref.py", "speed", "--dir", dir, "--models", "bert", "--batch", "1,2",
			"--device", "cpu", "--runs", "3", "--warmup", "1", "--ours", lat, "--json", sj).CombinedOutput()
		t.Logf("%s", out)
		if err != nil {
			t.Fatalf("speed --device cpu: %v", err)
		}
		var sp struct {
			Rows []struct {
				Model      string
				Batch      int
				TorchP50Ms float64  `json:"torch_p50_ms"`
				OursP50Ms  float64  `json:"ours_p50_ms"`
				MaxRelDiff *float64 `json:"max_rel_diff"`
			} `json:"rows"`
		}
		b, err := os.ReadFile(sj)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &sp); err != nil {
			t.Fatal(err)
		}
		if len(sp.Rows) != 2 || sp.Rows[1].Batch != 2 {
			t.Fatalf("speed.json: %s", b)
		}
		for _, r := range sp.Rows {
			// timed, next to ours, and torch's output is ours
			if r.TorchP50Ms <= 0 || r.OursP50Ms <= 0 || r.MaxRelDiff == nil || *r.MaxRelDiff > 1e-3 {
				t.Errorf("speed.json: %s", b)
			}
		}
	} else {
		t.Log("no torch here: the torch engine and speed are not checked")
	}
	p := filepath.Join(dir, "bert_b2_out.npy")
	shape, v, err := readNpy(p)
	if err != nil {
		t.Fatal(err)
	}
	v[17] += 0.01 * (1 + max(v[17], -v[17]))
	if err := writeNpy(p, shape, v); err != nil {
		t.Fatal(err)
	}
	out, err = check()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, "| bert | 4 layers, seq 32, hidden 128, 4 heads, FF 512 | 2 | 8192 |") ||
		!strings.Contains(out, "FAIL") || !strings.Contains(out, "5 passed, 1 failed") {
		t.Fatalf("check with a corrupted output: %v\n%s", err, out)
	}
}

// latency on the cpu backend: a row per model and batch, p50 <= p99.
func TestLatencyCPU(t *testing.T) {
	js := filepath.Join(t.TempDir(), "lat.json")
	out, err := runCmd(t, "latency", "-backend", "cpu", "-small", "-models", "squeezenet11", "-batch", "1,2", "-n", "5", "-warmup", "1", "-json", js)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out)
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rows []LatencyRow
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Batch != 1 || rows[1].Batch != 2 {
		t.Fatalf("rows: %+v", rows)
	}
	for _, r := range rows {
		if r.P50Ms <= 0 || r.P99Ms < r.P50Ms || r.Runs != 5 || r.Model != "squeezenet11" {
			t.Errorf("row %+v", r)
		}
	}
}

// Bad arguments are refused; without a GPU driver, kprof says so.
func TestArgs(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"frobnicate"},
		{"disb"}, // tools/disb -device cuda now
		{"export"},
		{"export", "-dir", t.TempDir(), "-batch", "0"},
		{"latency", "-backend", "tpu"},
		{"latency", "-n", "0"},
		{"kprof", "-roles", "LENET"},
		{"kprof", "-reps", "0"},
	} {
		if _, err := runCmd(t, args...); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	if _, err := cudrv.Open(); err == nil {
		t.Skip("this machine has a CUDA driver")
	}
	if _, err := runCmd(t, "kprof", "-roles", "VGG"); !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("kprof without a driver: %v, want ErrNoDriver", err)
	}
}

// kprof's summary table from a synthetic profile: one row per model,
// the kernels (version 0) that leave SMs idle and their time share, the
// other versions and the pruned ones, and the idle-leaving kernels a
// padded launch slows by more than the tolerance.
func TestKprofMarkdown(t *testing.T) {
	p := &kprof.Set{Device: "test", Models: []kprof.Model{{Model: "VGG", Batch: 1, Units: 132, Timing: "events", PadOccupancy: 1,
		Kernels: []kprof.Kernel{
			{Index: 0, Versions: []kprof.Version{
				{Grid: 1000, Occupancy: 2, SMs: 132, KernNs: 300e3, BlockNs: 20e3},
				{Grid: 4000, Occupancy: 2, SMs: 132, KernNs: 400e3, BlockNs: 6e3}}},
			{Index: 1, Versions: []kprof.Version{
				{Grid: 10, Occupancy: 2, SMs: 5, KernNs: 100e3, BlockNs: 90e3, PadNs: 120e3},
				{Grid: 40, Occupancy: 2, SMs: 20, KernNs: 200e3, BlockNs: 95e3, Pruned: true}}},
			{Index: 2, Versions: []kprof.Version{{}}}, // launches nothing
		}}, {Model: "RNET", Batch: 1, Units: 132}}}
	md := kprofMarkdown(p)
	for _, want := range []string{"| VGG | 1 | 132 | events | 2 | 1 | 25.0% | 100.0 / 300.0 | 20.0 / 90.0 | 1 | 2 | 1 | 1 |", "| RNET | 1 | 132 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("no %q in\n%s", want, md)
		}
	}
}

// run-gpu.sh parses (bash -n), names every step it documents, and refuses
// an unknown step before running anything.
func TestRunGPUScript(t *testing.T) {
	if out, err := exec.Command("bash", "-n", "run-gpu.sh").CombinedOutput(); err != nil {
		t.Fatalf("bash -n run-gpu.sh: %v\n%s", err, out)
	}
	b, err := os.ReadFile("run-gpu.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"info", "tests", "bench", "kernels", "kprof", "disb", "appliance", "export", "check", "latency", "speed", "selftest"} {
		if !strings.Contains(string(b), "\t"+s+")") {
			t.Errorf("run-gpu.sh has no step %s", s)
		}
	}
	cmd := exec.Command("bash", "run-gpu.sh", "nosuchstep")
	cmd.Env = append(os.Environ(), "OUT="+t.TempDir())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "unknown step") {
		t.Errorf("run-gpu.sh nosuchstep: %v\n%s", err, out)
	}
	// one step that needs no GPU, end to end: its log and status line
	py := python(t)
	dir := t.TempDir()
	cmd = exec.Command("bash", "run-gpu.sh", "selftest")
	cmd.Env = append(os.Environ(), "OUT="+dir, "PYTHON="+py)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run-gpu.sh selftest: %v\n%s", err, out)
	}
	st, err := os.ReadFile(filepath.Join(dir, "status.txt"))
	if err != nil || string(st) != "selftest 0\n" {
		t.Errorf("status.txt: %q, %v", st, err)
	}
	if log, err := os.ReadFile(filepath.Join(dir, "selftest.log")); err != nil || !strings.Contains(string(log), "6 passed, 0 failed") {
		t.Errorf("selftest.log: %q, %v", log, err)
	}
}

// lease.sh runs each step of its plan under its limit and packs what
// run-gpu.sh wrote into $OUT/gpu-results.tgz; a plan item without a
// limit is refused.
func TestLeaseScript(t *testing.T) {
	if out, err := exec.Command("bash", "-n", "lease.sh").CombinedOutput(); err != nil {
		t.Fatalf("bash -n lease.sh: %v\n%s", err, out)
	}
	py := python(t)
	pack, work := t.TempDir(), t.TempDir()
	cmd := exec.Command("bash", "lease.sh", "selftest:120")
	cmd.Env = append(os.Environ(), "OUT="+pack, "LEASE_WORK="+work, "PYTHON="+py)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("lease.sh selftest:120: %v\n%s", err, out)
	}
	out, err := exec.Command("tar", "tzf", filepath.Join(pack, "gpu-results.tgz")).CombinedOutput()
	if err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	for _, f := range []string{"./selftest.log", "./status.txt"} {
		if !strings.Contains(string(out), f+"\n") {
			t.Errorf("gpu-results.tgz has no %s:\n%s", f, out)
		}
	}
	cmd = exec.Command("bash", "lease.sh", "selftest")
	cmd.Env = append(os.Environ(), "OUT="+t.TempDir(), "LEASE_WORK="+t.TempDir(), "PYTHON="+py)
	b, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(b), "want STEP:SECONDS") {
		t.Errorf("lease.sh selftest (no limit): %v\n%s", err, b)
	}
}
