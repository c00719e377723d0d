// Package conformance holds libml's conformance tests (go test) and the
// test-data helpers they share: ONNX's own operator tests (Debian's
// libonnx-testdata) run through the cpu engine, real PaddleOCR models and
// the zoo models compared between the cpu engine and ONNX Runtime.
//
// Tolerance: a float value matches when |got-want| ≤ max(RelTol·|want|,
// AbsFloor). The absolute floor keeps values near zero (where a relative
// error is meaningless: sums that cancel, say) from failing on float32
// rounding noise; integers and booleans must match exactly, NaN matches
// NaN, an infinity matches the same infinity.
package conformance

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sluice/libml/graph"
	"sluice/libml/onnx"
)

// Tolerances of Compare.
const (
	RelTol   = 1e-4
	AbsFloor = 1e-5
)

// NodeTestDir is where Debian's libonnx-testdata keeps ONNX's node tests
// (test_*/model.onnx and test_data_set_N/{input,output}_N.pb).
const NodeTestDir = "/usr/share/libonnx-testdata/data/node"

// NodeTest is one of ONNX's operator tests: a model and its data sets.
type NodeTest struct {
	Name  string
	Dir   string
	Model *onnx.Model
	Sets  []DataSet
}

// DataSet is one set of inputs and expected outputs, named after the
// model's inputs and outputs.
type DataSet struct {
	Inputs, Outputs []*graph.Tensor
}

// Ops lists the operators the test's model uses (domain-qualified when not
// the default domain), sorted, without repeats.
func (nt *NodeTest) Ops() []string {
	seen := map[string]bool{}
	var ops []string
	for _, n := range nt.Model.Graph.Nodes {
		op := n.Op
		if n.Domain != "" {
			op = n.Domain + "." + op
		}
		if !seen[op] {
			seen[op] = true
			ops = append(ops, op)
		}
	}
	sort.Strings(ops)
	return ops
}

// NodeTestNames lists the node tests installed, sorted; none when
// libonnx-testdata is missing.
func NodeTestNames() []string {
	dirs, _ := filepath.Glob(filepath.Join(NodeTestDir, "test_*"))
	names := make([]string, 0, len(dirs))
	for _, d := range dirs {
		names = append(names, filepath.Base(d))
	}
	sort.Strings(names)
	return names
}

// LoadNodeTest reads the node test called name. Tensors are named by
// position after the model's inputs and outputs.
func LoadNodeTest(name string) (*NodeTest, error) {
	dir := filepath.Join(NodeTestDir, name)
	b, err := os.ReadFile(filepath.Join(dir, "model.onnx"))
	if err != nil {
		return nil, fmt.Errorf("node test %s: %w", name, err)
	}
	m, err := onnx.DecodeModel(b)
	if err != nil {
		return nil, fmt.Errorf("node test %s: %w", name, err)
	}
	nt := &NodeTest{Name: name, Dir: dir, Model: m}
	sets, _ := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
	sort.Strings(sets)
	for _, sd := range sets {
		var ds DataSet
		if ds.Inputs, err = readTensors(sd, "input", m.Graph.Inputs); err != nil {
			return nil, fmt.Errorf("node test %s: %w", name, err)
		}
		if ds.Outputs, err = readTensors(sd, "output", m.Graph.Outputs); err != nil {
			return nil, fmt.Errorf("node test %s: %w", name, err)
		}
		nt.Sets = append(nt.Sets, ds)
	}
	if len(nt.Sets) == 0 {
		return nil, fmt.Errorf("node test %s: no data sets", name)
	}
	return nt, nil
}

func readTensors(dir, prefix string, vis []graph.ValueInfo) ([]*graph.Tensor, error) {
	var ts []*graph.Tensor
	for i := 0; ; i++ {
		p := filepath.Join(dir, fmt.Sprintf("%s_%d.pb", prefix, i))
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			break
		}
		if err != nil {
			return nil, err
		}
		t, err := onnx.DecodeTensor(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if i >= len(vis) {
			return nil, fmt.Errorf("%s: the model has %d %ss", p, len(vis), prefix)
		}
		t.Name = vis[i].Name
		ts = append(ts, t)
	}
	return ts, nil
}

// Compare checks got against want: same shape, and every value within the
// package tolerance (exact for integers). The error names the first
// mismatch and counts the others.
func Compare(got, want *graph.Tensor) error {
	if !sameDims(got.Dims, want.Dims) {
		return fmt.Errorf("%s: shape %v, want %v", want.Name, got.Dims, want.Dims)
	}
	gf, wf := got.F32 != nil, want.F32 != nil
	n := int(want.NumElements())
	if gf != wf && n > 0 {
		return fmt.Errorf("%s: element type %s, want %s", want.Name, got.DType, want.DType)
	}
	bad, first := 0, ""
	if wf {
		if len(got.F32) != n || len(want.F32) != n {
			return fmt.Errorf("%s: %d values, want %d", want.Name, len(got.F32), n)
		}
		for i := range want.F32 {
			if !Close(got.F32[i], want.F32[i]) {
				if bad == 0 {
					first = fmt.Sprintf("[%d] = %g, want %g", i, got.F32[i], want.F32[i])
				}
				bad++
			}
		}
	} else {
		if len(got.I64) != n || len(want.I64) != n {
			return fmt.Errorf("%s: %d values, want %d", want.Name, len(got.I64), n)
		}
		for i := range want.I64 {
			if got.I64[i] != want.I64[i] {
				if bad == 0 {
					first = fmt.Sprintf("[%d] = %d, want %d", i, got.I64[i], want.I64[i])
				}
				bad++
			}
		}
	}
	if bad > 0 {
		return fmt.Errorf("%s: %s (%d of %d values off)", want.Name, first, bad, n)
	}
	return nil
}

// Close reports whether got matches want within the package tolerance.
func Close(got, want float32) bool {
	g, w := float64(got), float64(want)
	switch {
	case math.IsNaN(w):
		return math.IsNaN(g)
	case math.IsInf(w, 0):
		return g == w
	}
	return math.Abs(g-w) <= math.Max(RelTol*math.Abs(w), AbsFloor)
}

// MaxAbsDiff is the largest |a[i]-b[i]|.
func MaxAbsDiff(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		if d := math.Abs(float64(a[i]) - float64(b[i])); d > m || math.IsNaN(d) {
			m = d
		}
	}
	return m
}

func sameDims(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// RequireDeps reports a missing third-party file: the test fails when
// SLUICE_REQUIRE_DEPS=1 (as `make test` sets) and is skipped otherwise.
func RequireDeps(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("SLUICE_REQUIRE_DEPS") == "1" {
		t.Fatalf("%s is required (SLUICE_REQUIRE_DEPS=1): %v", what, err)
	}
	t.Skipf("%s not available (run `make deps`): %v", what, err)
}

// ModelPath returns the path of a third-party model file (see
// mk/models.mk), or reports it missing through RequireDeps.
func ModelPath(t testing.TB, file string) string {
	t.Helper()
	dir, err := onnx.ModelsDir()
	if err == nil {
		p := filepath.Join(dir, file)
		if _, err = os.Stat(p); err == nil {
			return p
		}
	}
	RequireDeps(t, "model "+file, err)
	return ""
}

// Deterministic fills n float32 values in [-1, 1) from a fixed seed (a
// 64-bit LCG), so engine and reference see the same input on every run.
func Deterministic(n int, seed uint64) []float32 {
	out := make([]float32, n)
	s := seed*6364136223846793005 + 1442695040888963407
	for i := range out {
		s = s*6364136223846793005 + 1442695040888963407
		out[i] = float32(int32(s>>32)) / float32(1<<31)
	}
	return out
}

// ShortOp trims the domain off an operator name from Ops.
func ShortOp(op string) string {
	if i := strings.LastIndex(op, "."); i >= 0 {
		return op[i+1:]
	}
	return op
}
