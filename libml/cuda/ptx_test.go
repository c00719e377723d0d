package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sluice/libml/cuda/cudrv"
)

func entriesByName(t *testing.T) map[string]Entry {
	t.Helper()
	es, err := Entries()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]Entry{}
	for _, e := range es {
		if _, dup := m[e.Name]; dup {
			t.Errorf("kernel %s defined twice", e.Name)
		}
		m[e.Name] = e
	}
	return m
}

// Every kernel the Go side launches is in the embedded PTX, and every
// entry there is one the Go side knows.
func TestEmbeddedKernels(t *testing.T) {
	es := entriesByName(t)
	want := KernelNames()
	for _, n := range want {
		if _, ok := es[n]; !ok {
			t.Errorf("kernel %s missing from the embedded PTX (make cuda-ptx)", n)
		}
	}
	for n, e := range es {
		if !slices.Contains(want, n) {
			t.Errorf("module %s: entry %s unknown to the Go side", e.Module, n)
		}
	}
	mods, err := Modules()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		s := string(m.PTX)
		if !strings.Contains(s, ".target sm_80") || !strings.Contains(s, ".address_size 64") {
			t.Errorf("module %s: not 64-bit sm_80 PTX", m.Name)
		}
	}
}

// The driver binding looks up the same entries that ParseEntries finds
// (cudrv.EntryNames, which LoadKernels uses, parses the names alone).
func TestDriverEntryNames(t *testing.T) {
	mods, err := Modules()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		es, err := ParseEntries(m.Name, m.PTX)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, e := range es {
			want = append(want, e.Name)
		}
		if got := cudrv.EntryNames(m.PTX); !slices.Equal(got, want) || len(got) == 0 {
			t.Errorf("module %s: the driver finds entries %v, ParseEntries %v", m.Name, got, want)
		}
	}
}

// The embedded PTX is generated from every native/cuda/*.cu file.
func TestModulesMatchSources(t *testing.T) {
	srcs, err := filepath.Glob("../../native/cuda/*.cu")
	if err != nil || len(srcs) == 0 {
		t.Skip("native/cuda not found beside the package")
	}
	mods, err := Modules()
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, m := range mods {
		have = append(have, m.Name)
	}
	for _, s := range srcs {
		n := strings.TrimSuffix(filepath.Base(s), ".cu")
		if !slices.Contains(have, n) {
			t.Errorf("%s has no PTX in libml/cuda/ptx (make cuda-ptx)", s)
		}
	}
}

// Every entry takes the parameters the launcher packs: (sg_state *st,
// long long idx, sg_args a) and, for sg_pad, (sg_pad_ctl *pad); the
// PTX's own declarations give the buffer layout cuLaunchKernel expects.
func TestEntryParams(t *testing.T) {
	for n, e := range entriesByName(t) {
		want := Signature(n)
		if !slices.Equal(e.Params, want) {
			t.Errorf("%s: PTX parameters %v, the launcher packs %v", n, e.Params, want)
			continue
		}
		offs, size := Layout(e.Params)
		var a Args
		var buf []byte
		if n == KernelPad {
			buf = PackPad(1, 2, &a, 3)
		} else {
			buf = Pack(1, 2, &a)
		}
		if len(buf) != size || offs[0] != 0 || offs[1] != 8 || offs[2] != 16 {
			t.Errorf("%s: layout %v size %d, packed %d bytes", n, offs, size, len(buf))
		}
	}
}

// globalOp matches an instruction that touches global (or generic)
// memory: loads, stores, atomics and reductions outside the param,
// shared, local and const spaces.
var globalOp = regexp.MustCompile(`^\s*(ld|st|atom|red)\.(?:volatile\.|relaxed\.\w+\.|acquire\.\w+\.|release\.\w+\.)?(global\.|[a-z]\d+|v\d)`)

func firstParamReg(body, entry string) (string, bool) {
	m := regexp.MustCompile(`ld\.param\.u64\s+(%rd\d+), \[` + entry + `_param_0\];`).FindStringSubmatch(body)
	if m == nil {
		return "", false
	}
	g := regexp.MustCompile(`cvta\.to\.global\.u64\s+(%rd\d+), ` + regexp.QuoteMeta(m[1]) + `;`).FindStringSubmatch(body)
	if g == nil {
		return m[1], true
	}
	return g[1], true
}

// The preemption prologue (REEF §4.2, §4.4), checked on the PTX of every
// kernel: the kernel's first global memory access is a volatile 32-bit
// load of the flag, at offset 0 of the state that parameter 0 points to;
// the block's exit decision is a barrier reduction (bar.red.or: all
// threads of a block leave together, so later barriers cannot hang); the
// execution index is stored at offset 8 of the state.
//
// The convention, as native/cuda/sg.h writes it: parameter 0 is the
// stream's sg_state, parameter 1 the execution index, parameter 2 the
// arguments; sg_enter runs before the body and SG_POLL inside long loops.
func TestPrologue(t *testing.T) {
	for n, e := range entriesByName(t) {
		st, ok := firstParamReg(e.Body, n)
		if !ok {
			t.Errorf("%s: parameter 0 (the stream state) is never loaded", n)
			continue
		}
		var first string
		for _, line := range strings.Split(e.Body, "\n") {
			if globalOp.MatchString(line) {
				first = strings.TrimSpace(line)
				break
			}
		}
		want := regexp.MustCompile(`^ld\.volatile\.global\.u32\s+%r\d+, \[` + regexp.QuoteMeta(st) + `\];$`)
		if !want.MatchString(first) {
			t.Errorf("%s: first global access is %q, want the flag load ld.volatile.global.u32 [%s]", n, first, st)
		}
		if !strings.Contains(e.Body, "bar.red.or.pred") {
			t.Errorf("%s: no bar.red.or: the exit decision is not block-uniform", n)
		}
		if !regexp.MustCompile(`st\.volatile\.global\.u64\s+\[` + regexp.QuoteMeta(st) + `\+8\]`).MatchString(e.Body) {
			t.Errorf("%s: the execution index is not stored at state+8", n)
		}
	}
}

// Kernels with long loops poll the flag inside them: more than one flag
// load per entry.
func TestInLoopPolls(t *testing.T) {
	es := entriesByName(t)
	for _, n := range []string{"sg_gemm", "sg_conv", "sg_gpool", "sg_softmax",
		"sg_layernorm", "sg_reduce", "sg_spin", "sg_pad"} {
		e, ok := es[n]
		if !ok {
			t.Errorf("%s missing", n)
			continue
		}
		st, _ := firstParamReg(e.Body, n)
		re := `ld\.volatile\.global\.u32\s+%r\d+, \[` + regexp.QuoteMeta(st) + `\];`
		if n == KernelPad {
			// the bodies poll whichever stream (RT or BE) a block serves
			re = `ld\.volatile(\.global)?\.u32\s+%r\d+, \[%rd\d+\];`
		}
		loads := regexp.MustCompile(re).FindAllString(e.Body, -1)
		if len(loads) < 2 {
			t.Errorf("%s: %d flag loads, want the prologue's and the loop's", n, len(loads))
		}
	}
}

// The operation numbering and the parameter-array sizes agree with the
// CPU engine's header (native/cpu/sluice_cpu.h), so engine kernels map
// onto these unchanged.
func TestOpCodesMatchCPU(t *testing.T) {
	b, err := os.ReadFile("../../native/cpu/sluice_cpu.h")
	if err != nil {
		t.Skip("native/cpu not found beside the package")
	}
	h := string(b)
	enum := regexp.MustCompile(`SK_OP_([A-Z0-9]+)\s*=\s*(\d+)`).FindAllStringSubmatch(h, -1)
	if len(enum) == 0 {
		t.Fatal("no enum sk_op in sluice_cpu.h")
	}
	for _, m := range enum {
		name := strings.ToLower(m[1])
		var code int
		for _, c := range m[2] {
			code = code*10 + int(c-'0')
		}
		op := Op(code)
		switch name {
		case "nop", "count":
			if name == "count" && op != OpCount {
				t.Errorf("SK_OP_COUNT = %d, OpCount = %d", code, OpCount)
			}
			continue
		}
		if op.String() != name {
			t.Errorf("SK_OP_%s = %d, but Op(%d) is %q", m[1], code, code, op.String())
		}
	}
	for _, c := range []struct {
		macro string
		v     int
	}{{"SK_MAX_IN", MaxIn}, {"SK_NP", NumP}, {"SK_NF", NumF}, {"SKP_ACT", PAct},
		{"SKF_ACT_A", FActA}, {"SKF_ACT_B", FActB}} {
		m := regexp.MustCompile(`#define ` + c.macro + `\s+(\d+)`).FindStringSubmatch(h)
		if m == nil || m[1] != itoa(c.v) {
			t.Errorf("%s: header says %v, Go %d", c.macro, m, c.v)
		}
	}
	if m := regexp.MustCompile(`SK_ACT_COUNT\s*=\s*(\d+)`).FindStringSubmatch(h); m == nil || m[1] != itoa(actCount) {
		t.Errorf("SK_ACT_COUNT = %v: update sg_act and Plan's activation check", m)
	}
	if m := regexp.MustCompile(`SK_BIN_COUNT\s*=\s*(\d+)`).FindStringSubmatch(h); m == nil || m[1] != itoa(binCount) {
		t.Errorf("SK_BIN_COUNT = %v: update sg_binop and Plan's binary check", m)
	}
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

// The emulator builds every kernel file: internal/emu links each
// native/cuda/*.cu as sg_<name>.cc.
func TestEmuLinks(t *testing.T) {
	srcs, _ := filepath.Glob("../../native/cuda/*.cu")
	for _, s := range srcs {
		n := strings.TrimSuffix(filepath.Base(s), ".cu")
		link := filepath.Join("internal", "emu", "sg_"+n+".cc")
		target, err := os.Readlink(link)
		if err != nil || filepath.Base(target) != n+".cu" {
			t.Errorf("%s: want a link to native/cuda/%s.cu (got %q, %v)", link, n, target, err)
		}
	}
}
