package sched

import (
	"context"
	"math/rand"
	"sync"
	"testing"

	"sluice/libml"
	"sluice/libml/cpu"
)

// One cpu device, many users: a reef scheduler with padding, a seq
// scheduler and the cpu backend run on the same two units at once (no
// thread pool of their own), every output bit-identical to the model run
// alone; the units' one padding slot goes to one scheduler; the device
// outlives its users and refuses to close while one holds it.
func TestSchedulersShareOneDevice(t *testing.T) {
	dev, err := cpu.NewDevice(2, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g := testGraph(t, "resnet")
	reefB := NewBackend(BackendOptions{Config: Config{Policy: PolicyREEF, Device: dev, PadBudgetMBs: -1}})
	seqB := NewBackend(BackendOptions{Config: Config{Policy: PolicySeq, Device: dev}})
	cpuB := cpu.OnDevice(dev)
	var bes []libml.Backend
	for _, b := range []libml.Backend{reefB, seqB, cpuB} {
		// Units asks for 1: a shared device's units win
		if err := b.Init(ctx, libml.BackendConfig{Units: 1}); err != nil {
			t.Fatal(err)
		}
		bes = append(bes, b)
	}
	if got := dev.Users(); got != 3 {
		t.Fatalf("%d users of the device, want 3", got)
	}
	if u := reefB.Scheduler().Units(); u != 2 || reefB.Scheduler().Pool() != dev.Pool() || seqB.Scheduler().Pool() != dev.Pool() {
		t.Fatalf("the schedulers do not run on the shared device's units (%d units)", u)
	}

	// a second padding scheduler on the same units is refused; one
	// without padding is not
	if _, err := New(Config{Policy: PolicyREEF, Device: dev, PadBudgetMBs: -1}); err == nil {
		t.Fatal("a second reef scheduler with padding took the device's padding slot")
	}
	noPad, err := New(Config{Policy: PolicyREEF, Device: dev, NoPadding: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := noPad.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Policy: PolicySeq, Device: dev, UnitNice: 5}); err == nil {
		t.Fatal("a scheduler changed the nice value of a shared device's threads")
	}

	r := rand.New(rand.NewSource(11))
	type user struct {
		be    libml.Backend
		inst  libml.Instance
		in    []float32
		want  []float32
		class string
	}
	var us []*user
	for k, b := range bes {
		inst, err := b.LoadModel(ctx, "resnet", g)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.ConfigureBatch(inst, 1); err != nil {
			t.Fatal(err)
		}
		u := &user{be: b, inst: inst, in: randInput(r, inst.InputSize()), class: "be"}
		if ri, ok := inst.(libml.RealTimeInstance); ok && k == 0 {
			ri.SetRealTime(false)
		}
		u.want = cpuReference(t, g, 1, u.in)
		us = append(us, u)
	}
	// reef gets an RT instance too: its batches preempt its BE ones
	rtInst, err := reefB.LinkModel(ctx, us[0].inst)
	if err != nil {
		t.Fatal(err)
	}
	if err := reefB.ConfigureBatch(rtInst, 1); err != nil {
		t.Fatal(err)
	}
	rtInst.(libml.RealTimeInstance).SetRealTime(true)
	rt := &user{be: reefB, inst: rtInst, in: randInput(r, rtInst.InputSize()), class: "rt"}
	rt.want = cpuReference(t, g, 1, rt.in)
	us = append(us, rt)

	var wg sync.WaitGroup
	errs := make(chan error, len(us))
	for _, u := range us {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]float32, u.inst.OutputSize())
			for n := 0; n < 6; n++ {
				if err := u.be.InferBatch(ctx, u.inst, 1, u.in, out); err != nil {
					errs <- err
					return
				}
				if d := sameBits(out, u.want); d != "" {
					errs <- &bitsErr{u.be.Name() + "/" + u.class, d}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	for _, u := range us {
		if err := u.inst.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := dev.Close(); err == nil {
		t.Fatal("the device closed while three backends held it")
	}
	for _, b := range bes {
		if err := b.Deinit(); err != nil {
			t.Fatal(err)
		}
	}
	if got := dev.Users(); got != 0 {
		t.Fatalf("%d users after every backend stopped", got)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dev.Acquire(); err == nil {
		t.Fatal("a closed device was acquired")
	}
}

type bitsErr struct{ who, diff string }

func (e *bitsErr) Error() string {
	return e.who + ": output differs from the model run alone: " + e.diff
}
