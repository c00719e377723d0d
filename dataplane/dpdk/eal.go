//go:build linux && cgo

package dpdk

/*
#include <stdlib.h>
#include "sl_dpdk.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"
)

// Available reports whether this build includes DPDK (Linux with cgo).
const Available = true

// eal is the process-wide EAL state. rte_eal_init can run once per process
// and never again, even after rte_eal_cleanup; this is the one piece of
// global mutable state in the package, and it is inherent to DPDK.
var eal struct {
	mu         sync.Mutex
	tried      bool
	args       []string
	err        error
	closed     bool
	runtimeDir string
}

// InitEAL starts DPDK's Environment Abstraction Layer with args (EAL
// options, without the program name). It runs rte_eal_init at most once per
// process: later calls with the same arguments return the first call's
// result, error included; later calls with other arguments return an error
// saying which arguments the EAL runs with. After CleanupEAL it returns
// ErrEALClosed.
//
// rte_eal_init runs on a dedicated OS thread that exits afterwards, so no
// Go thread is left registered as an EAL lcore or pinned to a CPU.
func InitEAL(args []string) error {
	eal.mu.Lock()
	defer eal.mu.Unlock()
	if eal.closed {
		return ErrEALClosed
	}
	if eal.tried {
		if !slices.Equal(args, eal.args) {
			if eal.err != nil {
				return eal.err
			}
			return fmt.Errorf("dpdk: EAL already initialized with %q; cannot re-initialize with %q",
				strings.Join(eal.args, " "), strings.Join(args, " "))
		}
		return eal.err
	}
	eal.tried = true
	eal.args = slices.Clone(args)
	eal.err = initEAL(eal.args)
	// Only a directory named after our own --file-prefix is ever removed
	// by CleanupEAL: never the shared default (/var/run/dpdk/rte), and never
	// one a failed init did not get to set up.
	if pfx := filePrefixOf(args); pfx != "" {
		if d := C.GoString(C.sl_eal_runtime_dir()); filepath.Base(d) == pfx {
			eal.runtimeDir = d
		}
	}
	return eal.err
}

func initEAL(args []string) error {
	// argv is kept for the life of the process: EAL may keep pointers into
	// it (getopt permutes it, some options are referenced later).
	argv := make([]*C.char, 0, len(args)+2)
	argv = append(argv, cstr("sluice"))
	for _, a := range args {
		argv = append(argv, cstr(a))
	}
	cargv := (**C.char)(C.malloc(C.size_t(len(argv)+1) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	vs := unsafe.Slice(cargv, len(argv)+1)
	copy(vs, argv)
	vs[len(argv)] = nil

	done := make(chan error, 1)
	go func() {
		// No UnlockOSThread: the thread EAL saw as its main lcore exits
		// with this goroutine.
		runtime.LockOSThread()
		var e cErr
		if rc := C.sl_eal_init(C.int(len(argv)), cargv, e.ptr(), errBufLen); rc != 0 {
			done <- fmt.Errorf("dpdk: init EAL %q: %s", strings.Join(args, " "), e.String())
			return
		}
		done <- nil
	}()
	return <-done
}

// EALInitialized reports whether InitEAL succeeded and CleanupEAL has not
// run.
func EALInitialized() bool {
	eal.mu.Lock()
	defer eal.mu.Unlock()
	return eal.tried && eal.err == nil && !eal.closed
}

// RuntimeDir returns the EAL runtime directory (/var/run/dpdk/<prefix> as
// root) that CleanupEAL removes: set when the EAL arguments name a
// --file-prefix, "" otherwise.
func RuntimeDir() string {
	eal.mu.Lock()
	defer eal.mu.Unlock()
	return eal.runtimeDir
}

// CleanupEAL releases the EAL (rte_eal_cleanup) and removes its runtime
// directory when the EAL arguments gave it a --file-prefix of its own (as
// DefaultEALArgs does). Every port must be closed first. The EAL cannot be started
// again in this process. It is a no-op when the EAL never started.
func CleanupEAL() error {
	eal.mu.Lock()
	defer eal.mu.Unlock()
	if eal.closed || !eal.tried {
		eal.closed = eal.closed || eal.tried
		return nil
	}
	eal.closed = true
	var err error
	if eal.err == nil {
		if rc := C.sl_eal_cleanup(); rc != 0 {
			err = fmt.Errorf("dpdk: rte_eal_cleanup: errno %d", -int(rc))
		}
	}
	if d := eal.runtimeDir; d != "" && filepath.IsAbs(d) && strings.Count(d, "/") >= 2 {
		if rerr := os.RemoveAll(d); rerr != nil && err == nil {
			err = fmt.Errorf("dpdk: remove runtime dir: %w", rerr)
		}
	}
	return err
}

// Version returns the DPDK version string ("DPDK 22.11.11").
func Version() string { return C.GoString(C.sl_version()) }
