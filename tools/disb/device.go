package main

import (
	"context"
	"fmt"

	"sluice/libml"
	"sluice/libml/cuda"
	"sluice/libml/sched"
)

// device is where the benchmark's schedulers run: the cpu's worker units,
// or the cuda backend (a GPU, or the kernel emulator) as a segment device
// of the same scheduler.
type device struct {
	// label names it in the report: "cpu", "cuda" or "cuda-emu"
	label                    string
	nunits, window, unitNice int
	cuda                     *cuda.Backend
}

// openDevice opens the device name ("cpu" or "cuda"; mode "driver" or
// "emu" for cuda).
func openDevice(name, mode string, units, window, unitNice int) (*device, error) {
	d := &device{label: name, nunits: units, window: window, unitNice: unitNice}
	switch name {
	case "cpu":
		return d, nil
	case "cuda":
	default:
		return nil, fmt.Errorf("unknown device %q (have cpu, cuda)", name)
	}
	opts := cuda.Options{Window: window}
	switch mode {
	case "driver":
	case "emu":
		opts.Emulate = true
		d.label = "cuda-emu"
	default:
		return nil, fmt.Errorf("-cuda %q: want driver or emu", mode)
	}
	d.cuda = cuda.NewBackend(opts)
	if err := d.cuda.Init(context.Background(), libml.BackendConfig{}); err != nil {
		return nil, err
	}
	return d, nil
}

// units is the device's unit count (worker units, or SMs).
func (d *device) units() int {
	if d.cuda != nil {
		return d.cuda.Units()
	}
	return d.nunits
}

// config is a scheduler configuration of policy p on the device.
func (d *device) config(p sched.Policy) sched.Config {
	if d.cuda != nil {
		return sched.Config{Policy: p, Segments: d.cuda}
	}
	return sched.Config{Policy: p, Units: d.nunits, Window: d.window, UnitNice: d.unitNice}
}

// close closes the cuda backend (its schedulers closed first).
func (d *device) close() {
	if d.cuda != nil {
		if err := d.cuda.Deinit(); err != nil {
			fmt.Println("disb: cuda:", err)
		}
	}
}
