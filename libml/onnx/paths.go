package onnx

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// ModelsDirEnv names the environment variable that points at the folder of
// third-party ONNX models (set by the Makefile, see mk/models.mk).
const ModelsDirEnv = "SLUICE_MODELS_DIR"

// ModelsDir returns the folder holding third-party ONNX models:
// $SLUICE_MODELS_DIR when set, else third_party/models under the repository
// root found above the working directory. It does not check that the
// folder exists.
func ModelsDir() (string, error) {
	if d := os.Getenv(ModelsDirEnv); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("onnx: %s is unset: %w", ModelsDirEnv, err)
	}
	return filepath.Join(root, "third_party", "models"), nil
}

// RepoRoot returns the sluice repository root: the nearest folder at or
// above the working directory whose go.mod declares module sluice.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("repository root: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && isSluiceModule(b) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("repository root: no go.mod for module sluice above the working directory")
		}
		dir = parent
	}
}

func isSluiceModule(gomod []byte) bool {
	for _, line := range bytes.Split(gomod, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) == 2 && string(f[0]) == "module" && string(f[1]) == "sluice" {
			return true
		}
	}
	return false
}
