// Package cudrv is the thin cgo binding of the CUDA driver API that the
// CUDA backend (libml/cuda) runs on. It opens libcuda.so.1 at run time
// with dlopen and resolves the entry points with dlsym (cudrv.c,
// cudrv.h), so nothing links against CUDA and one binary runs with or
// without a GPU; without cgo, Open reports ErrNoDriver.
//
// Every driver operation is one cgo call (the C side makes the context
// current in the same call, since Go moves goroutines between OS
// threads): contexts (a device's own, its primary context, green
// contexts), modules and their functions, launches, device and pinned
// host memory, streams and events. It holds no backend logic: the PTX
// modules, the argument layouts, plans and scheduling are libml/cuda's.
package cudrv
