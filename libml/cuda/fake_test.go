//go:build linux && cgo

package cuda

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"sluice/libml/cuda/cudrv"
)

// TestFakeDriver runs the driver binding (cudrv) against
// testdata/fakecuda.c, a fake libcuda built here with cc: symbol
// resolution, contexts, module loading, the launch parameter buffer,
// memory, streams, events, green contexts and error reporting, without a
// GPU. It runs in a child process (the loaded driver is process-wide),
// and is skipped where there is no C compiler or a real GPU is under
// test.
func TestFakeDriver(t *testing.T) {
	inFakeDriverChild(t, "SLUICE_FAKE_CUDA", "TestFakeDriver", "fake_test.go", fakeDriverChecks)
}

// inFakeDriverChild runs checks against the fake libcuda of
// testdata/fakecuda.c, built here with cc, in a child process (the loaded
// driver is process-wide) that runs test name with the library's path in
// the environment variable env; the child's log lines from file are
// logged here. It skips where there is no C compiler or a real GPU is
// under test.
func inFakeDriverChild(t *testing.T, env, name, file string, checks func(*testing.T, string)) {
	t.Helper()
	if lib := os.Getenv(env); lib != "" {
		checks(t, lib)
		return
	}
	if gpuWanted() {
		t.Skip("SLUICE_GPU=1: the real driver is under test")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	lib := filepath.Join(t.TempDir(), "libcuda-fake.so")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", lib, "testdata/fakecuda.c").CombinedOutput(); err != nil {
		t.Fatalf("building the fake driver: %v\n%s", err, out)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(os.Environ(), env+"="+lib)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+name)) {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, file) {
			t.Log(strings.TrimSpace(l))
		}
	}
}

func fakeDriverChecks(t *testing.T, lib string) {
	d, err := cudrv.OpenLib(lib)
	if err != nil {
		t.Fatal(err)
	}
	if d.Version != 12040 || d.Devices != 1 || !d.Green {
		t.Fatalf("driver %+v", d)
	}
	if _, err := d.Device(1); err == nil {
		t.Error("device 1 of 1 opened")
	}
	dev, err := d.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	if dev.Name != "Fake GPU" || dev.SMs != 4 || dev.CC != [2]int{9, 0} || dev.Memory != 1<<30 {
		t.Errorf("device %+v", dev)
	}
	ks, err := loadKernels(dev)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range KernelNames() {
		f := ks.Func(n)
		if f == nil || f.Regs != 32 || f.MaxThread != 1024 {
			t.Fatalf("%s: %+v", n, f)
		}
	}
	if occ, err := ks.Func("sg_gemm").Occupancy(); err != nil || occ != 4 {
		t.Errorf("occupancy %d %v", occ, err)
	}

	// memory and a launch: the fake "kernel" stores idx into the state
	// and copies the argument record to a.Out
	st, err := dev.Alloc(StateSize)
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := EncodeState(0, 0)
	if err := dev.Write(st, sb); err != nil {
		t.Fatal(err)
	}
	out, _ := dev.Alloc(ArgsSize)
	a := Args{Out: out, Aux: 0xa0a0}
	a.P[5], a.F[2], a.T[TBase] = -77, 2.5, 9
	s, err := dev.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.Func("sg_unary").Launch(3, s, Pack(st, 4242, &a)); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if idle, err := s.Idle(); idle || err != nil {
		t.Errorf("Idle %v %v (the fake stream is never idle)", idle, err)
	}
	got := make([]byte, StateSize)
	dev.Read(got, st)
	if DecodeState(got).Exec != 4242 {
		t.Errorf("execution index %d", DecodeState(got).Exec)
	}
	ab := make([]byte, ArgsSize)
	dev.Read(ab, out)
	var back Args
	back.Decode(ab)
	if back != a {
		t.Errorf("arguments arrived as %+v", back)
	}
	if err := ks.Func("sg_gemm").Launch(0, nil, Pack(st, 0, &a)); err == nil {
		t.Error("a launch of 0 blocks was accepted")
	}

	// errors carry the driver's name of the result
	_, err = dev.Alloc(1 << 40)
	var ce *cudrv.Error
	if !errors.As(err, &ce) || ce.Code != 2 || ce.Name != "CUDA_ERROR_FAKE_2" || ce.Op != "cuMemAlloc" {
		t.Errorf("alloc error %v", err)
	}

	// pinned memory, async copies, memset, events
	h, err := dev.HostAlloc(64)
	if err != nil {
		t.Fatal(err)
	}
	if h.Dev != uint64(uintptr(unsafe.Pointer(&h.Bytes()[0]))) {
		t.Errorf("mapped address %#x", h.Dev)
	}
	copy(h.Bytes(), "0123456789")
	if err := s.WriteAsync(out, h, 2, 4); err != nil {
		t.Fatal(err)
	}
	if err := s.ReadAsync(h, 20, out, 4); err != nil || string(h.Bytes()[20:24]) != "2345" {
		t.Errorf("async copies: %v %q", err, h.Bytes()[20:24])
	}
	if err := s.WriteAsync(out, h, 60, 8); err == nil {
		t.Error("copy past the host buffer accepted")
	}
	if err := dev.Memset32(out, 0x01020304, 2); err != nil {
		t.Fatal(err)
	}
	e0, _ := dev.NewEvent()
	e1, _ := dev.NewEvent()
	e0.Record(s)
	e1.Record(nil)
	if ms, err := e1.Since(e0); err != nil || ms != 1.5 {
		t.Errorf("elapsed %v %v", ms, err)
	}
	mem := make([]byte, 4096) // stands in for C memory: the fake never touches it
	if p, err := dev.RegisterHost(unsafe.Pointer(&mem[0]), len(mem)); err != nil || p == 0 {
		t.Errorf("register %v", err)
	}

	// green contexts: the partition's SM count comes from the resource
	// record; its streams are green-context streams
	g, err := dev.Green(1)
	if err != nil {
		t.Fatal(err)
	}
	if g.SMs != 2 {
		t.Errorf("green context of %d SMs, want 2 (1 rounded up)", g.SMs)
	}
	gs, err := g.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dev.Green(9); err == nil {
		t.Error("a green context larger than the device was created")
	}
	// ranges: a run of the split's groups (2 SMs each here), starting on
	// a group
	if r, err := dev.GreenRange(2, 2); err != nil || r.SMs != 2 {
		t.Errorf("GreenRange(2, 2): %v", err)
	} else {
		r.Close()
	}
	if n, gran, err := dev.SMGroups(); err != nil || n != 2 || gran != 2 {
		t.Errorf("SMGroups: %d of %d, %v; want 2 of 2", n, gran, err)
	}
	if _, err := dev.GreenRange(1, 2); err == nil {
		t.Error("a green context starting inside a group was created")
	}
	for _, err := range []error{gs.Close(), g.Close(), e0.Close(), e1.Close(), h.Free(), s.Close(),
		dev.Free(out), dev.Free(st), ks.Close(), dev.Close()} {
		if err != nil {
			t.Error(err)
		}
	}
	t.Logf("fake driver: %d kernels loaded, launch parameters, memory, streams, events, green contexts OK", len(KernelNames()))
}
