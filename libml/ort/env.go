// Package ort is libml's "ort" backend: ONNX Runtime (libonnxruntime, taken
// from the onnxruntime-node npm tarball by `make deps`) driven through
// github.com/yalue/onnxruntime_go. It runs models libml's own engine cannot
// compile, and it is the reference oracle the conformance tests compare
// the engine against. Its kernels are opaque, so the scheduler gives it
// job-level scheduling only.
package ort

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	ortgo "github.com/yalue/onnxruntime_go"

	"sluice/libml/onnx"
)

// LibraryEnv names the environment variable holding the path of
// libonnxruntime.so (set by the Makefile, see mk/models.mk).
const LibraryEnv = "SLUICE_ORT_LIB"

// LibraryPath returns where libonnxruntime is: $SLUICE_ORT_LIB when set,
// else third_party/onnxruntime/lib/libonnxruntime.so.1 under the repository
// root found above the working directory. It does not check that the file
// exists.
func LibraryPath() (string, error) {
	if p := os.Getenv(LibraryEnv); p != "" {
		return p, nil
	}
	root, err := onnx.RepoRoot()
	if err != nil {
		return "", fmt.Errorf("ort: %s is unset: %w", LibraryEnv, err)
	}
	return filepath.Join(root, "third_party", "onnxruntime", "lib", "libonnxruntime.so.1"), nil
}

// ortEnv counts the backends using onnxruntime_go's environment. ONNX
// Runtime keeps one environment per process (onnxruntime_go holds it in
// package variables), so this is the one piece of process-wide state here:
// the first Init creates the environment, the last Deinit destroys it.
var ortEnv struct {
	mu   sync.Mutex
	refs int
	lib  string
	// owned is false when someone else initialized onnxruntime_go before
	// us; then we never destroy it.
	owned bool
}

func acquireEnv(lib string) error {
	ortEnv.mu.Lock()
	defer ortEnv.mu.Unlock()
	if ortEnv.refs > 0 {
		if lib != ortEnv.lib {
			return fmt.Errorf("ort: ONNX Runtime already loaded from %s, cannot also load %s in one process", ortEnv.lib, lib)
		}
		ortEnv.refs++
		return nil
	}
	if ortgo.IsInitialized() {
		ortEnv.refs, ortEnv.lib, ortEnv.owned = 1, lib, false
		return nil
	}
	if _, err := os.Stat(lib); err != nil {
		return fmt.Errorf("ort: ONNX Runtime library: %w (run `make deps`, or set %s)", err, LibraryEnv)
	}
	ortgo.SetSharedLibraryPath(lib)
	if err := ortgo.InitializeEnvironment(ortgo.WithLogLevelError()); err != nil {
		return fmt.Errorf("ort: load %s: %w", lib, err)
	}
	ortEnv.refs, ortEnv.lib, ortEnv.owned = 1, lib, true
	return nil
}

func releaseEnv() error {
	ortEnv.mu.Lock()
	defer ortEnv.mu.Unlock()
	if ortEnv.refs == 0 {
		return nil
	}
	ortEnv.refs--
	if ortEnv.refs > 0 || !ortEnv.owned {
		return nil
	}
	if err := ortgo.DestroyEnvironment(); err != nil {
		return fmt.Errorf("ort: destroy environment: %w", err)
	}
	return nil
}

// Version is the version of the loaded ONNX Runtime ("" before Init).
func Version() string {
	if !ortgo.IsInitialized() {
		return ""
	}
	return ortgo.GetVersion()
}
