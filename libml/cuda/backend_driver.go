//go:build linux && cgo

package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"sluice/libml/cuda/cudrv"
)

// openDriver opens device ordinal through the CUDA driver (libname ""
// is libcuda.so.1, tests name the fake driver) and loads the kernels. It
// prefers the device's primary context, whose memory green contexts
// share; without the primary-context entry points it falls back to a
// context of its own and cannot partition.
func openDriver(libname string, ordinal int) (gpuCtx, error) {
	var d *cudrv.Driver
	var err error
	if libname == "" {
		d, err = cudrv.Open()
	} else {
		d, err = cudrv.OpenLib(libname)
	}
	if err != nil {
		return nil, err
	}
	dev, err := d.Primary(ordinal)
	primary := err == nil
	if err != nil {
		if dev, err = d.Device(ordinal); err != nil {
			return nil, err
		}
	}
	ks, err := loadKernels(dev)
	if err != nil {
		dev.Close()
		return nil, err
	}
	return &drvGPU{dev: dev, ks: ks, green: primary && d.Green}, nil
}

// loadKernels loads the embedded PTX modules (Modules) into dv's
// context.
func loadKernels(dv *cudrv.Device) (*cudrv.Kernels, error) {
	mods, err := Modules()
	if err != nil {
		return nil, err
	}
	return dv.LoadKernels(mods)
}

// drvGPU is a driver context with its kernels loaded.
type drvGPU struct {
	dev   *cudrv.Device
	ks    *cudrv.Kernels
	green bool
}

func (g *drvGPU) SMs() int                              { return g.dev.SMs }
func (g *drvGPU) Green() bool                           { return g.green }
func (g *drvGPU) Alloc(n int) (uint64, error)           { return g.dev.Alloc(max(n, 4)) }
func (g *drvGPU) Free(p uint64) error                   { return g.dev.Free(p) }
func (g *drvGPU) Write(dst uint64, b []byte) error      { return g.dev.Write(dst, b) }
func (g *drvGPU) Read(b []byte, src uint64) error       { return g.dev.Read(b, src) }
func (g *drvGPU) UnregisterHost(p unsafe.Pointer) error { return g.dev.UnregisterHost(p) }

func (g *drvGPU) RegisterHost(p unsafe.Pointer, n int) (uint64, error) {
	return g.dev.RegisterHost(p, n)
}

func (g *drvGPU) HostAlloc(n int) (pinned, error) {
	h, err := g.dev.HostAlloc(max(n, 8))
	if err != nil {
		return nil, err
	}
	return drvPinned{h}, nil
}

func (g *drvGPU) NewStream(priority int) (gpuStream, error) {
	s, err := g.dev.NewStream(priority)
	if err != nil {
		return nil, err
	}
	return &drvStream{s: s, ks: g.ks}, nil
}

func (g *drvGPU) NewEvent() (gpuEvent, error) {
	e, err := g.dev.NewEvent()
	if err != nil {
		return nil, err
	}
	return drvEvent{e}, nil
}

// Partition makes a green context and loads the kernels into it (the
// driver caches the JIT output, so this costs a module load, not a
// compilation, after the first time).
func (g *drvGPU) SMGroups() (int, int, error) {
	if !g.green {
		return 0, 0, ErrNoGreen
	}
	return g.dev.SMGroups()
}

func (g *drvGPU) Partition(first, sms int) (gpuCtx, error) {
	if !g.green {
		return nil, fmt.Errorf("%w (or the device was opened without its primary context)", ErrNoGreen)
	}
	p, err := g.dev.GreenRange(first, sms)
	if err != nil {
		return nil, err
	}
	ks, err := loadKernels(p)
	if err != nil {
		p.Close()
		return nil, err
	}
	return &drvGPU{dev: p, ks: ks}, nil
}

func (g *drvGPU) Close() error {
	return errors.Join(g.ks.Close(), g.dev.Close())
}

type drvStream struct {
	s  *cudrv.Stream
	ks *cudrv.Kernels
}

func (s *drvStream) Launch(kernel string, grid int, params []byte) error {
	f := s.ks.Func(kernel)
	if f == nil {
		return fmt.Errorf("cuda: no kernel %s loaded", kernel)
	}
	return f.Launch(grid, s.s, params)
}

func (s *drvStream) WriteAsync(dst uint64, src pinned, off, n int) error {
	return s.s.WriteAsync(dst, src.(drvPinned).h, off, n)
}

func (s *drvStream) ReadAsync(dst pinned, off int, src uint64, n int) error {
	return s.s.ReadAsync(dst.(drvPinned).h, off, src, n)
}

func (s *drvStream) Sync() error  { return s.s.Sync() }
func (s *drvStream) Close() error { return s.s.Close() }

type drvEvent struct{ e *cudrv.Event }

func (e drvEvent) Record(s gpuStream) error { return e.e.Record(s.(*drvStream).s) }
func (e drvEvent) Sync() error              { return e.e.Sync() }
func (e drvEvent) Close() error             { return e.e.Close() }

type drvPinned struct{ h *cudrv.HostBuffer }

func (p drvPinned) Dev() uint64           { return p.h.Dev }
func (p drvPinned) Put(off int, b []byte) { copy(p.h.Bytes()[off:], b) }
func (p drvPinned) Get(off int, b []byte) { copy(b, p.h.Bytes()[off:]) }
func (p drvPinned) Free() error           { return p.h.Free() }
