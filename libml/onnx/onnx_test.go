package onnx

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"sluice/libml/graph"
)

// sampleGraph uses every attribute kind, several tensor types and both
// static and symbolic dimensions.
func sampleGraph() *graph.Graph {
	return &graph.Graph{
		Name:  "sample",
		Opset: 13,
		Inputs: []graph.ValueInfo{
			{Name: "x", DType: graph.Float32, Dims: []int64{-1, 3, 4}, DimParams: []string{"N", "", ""}},
			{Name: "s", DType: graph.Int64, Dims: []int64{}},
		},
		Outputs: []graph.ValueInfo{
			{Name: "y", DType: graph.Float32, Dims: []int64{-1, 3, 4}},
			{Name: "z", DType: graph.Float32},
		},
		Initializers: []*graph.Tensor{
			{Name: "w", DType: graph.Float32, Dims: []int64{3, 4}, F32: []float32{1, -2, 3.5, 0, 5, 6, 7, 8, 9, 10, 11, -1e-7}},
			{Name: "h", DType: graph.Float16, Dims: []int64{2}, F32: []float32{0.5, -65504}},
			{Name: "d", DType: graph.Float64, Dims: []int64{1}, F32: []float32{0.25}},
			{Name: "i32", DType: graph.Int32, Dims: []int64{2}, I64: []int64{-7, 1 << 30}},
			{Name: "i64", DType: graph.Int64, Dims: []int64{3}, I64: []int64{-1, 0, 1 << 40}},
			{Name: "u8", DType: graph.Uint8, Dims: []int64{2, 1}, I64: []int64{0, 255}},
			{Name: "i8", DType: graph.Int8, Dims: []int64{1}, I64: []int64{-128}},
			{Name: "b", DType: graph.Bool, Dims: []int64{3}, I64: []int64{1, 0, 1}},
			{Name: "scalar", DType: graph.Float32, Dims: nil, F32: []float32{42}},
			{Name: "empty", DType: graph.Float32, Dims: []int64{0, 3}, F32: []float32{}},
		},
		Nodes: []graph.Node{
			{Name: "add", Op: "Add", Inputs: []string{"x", "w"}, Outputs: []string{"a"}},
			{Name: "attrs", Op: "Custom", Domain: "com.example", Inputs: []string{"a", "", "s"}, Outputs: []string{"y", "z"}, Attrs: []graph.Attr{
				{Name: "f", Kind: graph.AttrFloat, F: 0.125},
				{Name: "i", Kind: graph.AttrInt, I: -3},
				{Name: "s", Kind: graph.AttrString, S: "NOTSET"},
				{Name: "t", Kind: graph.AttrTensor, T: &graph.Tensor{DType: graph.Int64, Dims: []int64{2}, I64: []int64{4, 5}}},
				{Name: "fs", Kind: graph.AttrFloats, Floats: []float32{1, 2.5}},
				{Name: "is", Kind: graph.AttrInts, Ints: []int64{0, -1, 1 << 33}},
				{Name: "ss", Kind: graph.AttrStrings, Strings: []string{"a", ""}},
			}},
		},
	}
}

func TestRoundTrip(t *testing.T) {
	g := sampleGraph()
	b, err := Encode(g)
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeModel(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Opsets[""] != 13 || m.Opsets["com.example"] != 1 || m.IRVersion != 7 || m.ProducerName != ProducerName {
		t.Errorf("model fields: opsets %v ir %d producer %q", m.Opsets, m.IRVersion, m.ProducerName)
	}
	if !reflect.DeepEqual(m.Graph, g) {
		t.Errorf("round trip differs:\n got %+v\nwant %+v", m.Graph, g)
		for i := range g.Initializers {
			if !reflect.DeepEqual(m.Graph.Initializers[i], g.Initializers[i]) {
				t.Errorf("initializer %d: got %+v want %+v", i, m.Graph.Initializers[i], g.Initializers[i])
			}
		}
	}
	// Encoding the decoded model again gives the same bytes.
	b2, err := EncodeModel(m)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(b2) {
		t.Error("re-encoding changed the bytes")
	}
}

func TestFloat16(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := Float16ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			if back := Float32ToFloat16(f); back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back := Float32ToFloat16(f); back != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
	}
	cases := []struct {
		f float32
		h uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {1e6, 0x7c00},
		{5.960464477539063e-08, 0x0001}, {1e-9, 0}, {1.0009765625, 0x3c01},
		{1.00048828125, 0x3c00}, // halfway, rounds to even
		{1.00146484375, 0x3c02}, // halfway, rounds to even (up)
	}
	for _, c := range cases {
		if got := Float32ToFloat16(c.f); got != c.h {
			t.Errorf("Float32ToFloat16(%v) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
}

// tensorProto builds a TensorProto by hand, to test the typed-data fields
// the encoder never writes.
func tensorProto(dtype int64, dims []int64, fill func(b []byte) []byte) []byte {
	var b []byte
	for _, d := range dims {
		b = putVarint(b, 1, d)
	}
	b = putVarint(b, 2, dtype)
	b = putString(b, 8, "t")
	return fill(b)
}

func TestTypedData(t *testing.T) {
	// float_data, unpacked and packed.
	b := tensorProto(1, []int64{2}, func(b []byte) []byte {
		b = putFloat(b, 4, 1.5)
		return putFloat(b, 4, -2)
	})
	checkF32(t, b, graph.Float32, []float32{1.5, -2})
	b = tensorProto(1, []int64{2}, func(b []byte) []byte { return putPackedFloats(b, 4, []float32{3, 4}) })
	checkF32(t, b, graph.Float32, []float32{3, 4})
	// float16 in int32_data.
	b = tensorProto(10, []int64{2}, func(b []byte) []byte { return putPackedVarints(b, 5, []int64{0x3c00, 0xc000}) })
	checkF32(t, b, graph.Float16, []float32{1, -2})
	// bfloat16 in raw_data.
	b = tensorProto(16, []int64{1}, func(b []byte) []byte { return putBytes(b, 9, []byte{0x80, 0x3f}) })
	checkF32(t, b, dtypeBFloat16, []float32{1})
	// double_data.
	b = tensorProto(11, []int64{1}, func(b []byte) []byte {
		b = protowire.AppendTag(b, 10, protowire.Fixed64Type)
		return protowire.AppendFixed64(b, math.Float64bits(0.5))
	})
	checkF32(t, b, graph.Float64, []float32{0.5})
	// int32_data for int32, uint8, int8, bool; int64_data; uint64_data.
	neg := int64(-5)
	b = tensorProto(6, []int64{2}, func(b []byte) []byte { return putPackedVarints(b, 5, []int64{neg, 7}) })
	checkI64(t, b, graph.Int32, []int64{-5, 7})
	b = tensorProto(2, []int64{2}, func(b []byte) []byte { return putPackedVarints(b, 5, []int64{200, 3}) })
	checkI64(t, b, graph.Uint8, []int64{200, 3})
	b = tensorProto(3, []int64{1}, func(b []byte) []byte { return putVarint(b, 5, -100) })
	checkI64(t, b, graph.Int8, []int64{-100})
	b = tensorProto(9, []int64{3}, func(b []byte) []byte { return putPackedVarints(b, 5, []int64{1, 0, 1}) })
	checkI64(t, b, graph.Bool, []int64{1, 0, 1})
	b = tensorProto(7, []int64{2}, func(b []byte) []byte { return putPackedVarints(b, 7, []int64{-1 << 40, 9}) })
	checkI64(t, b, graph.Int64, []int64{-1 << 40, 9})
	b = tensorProto(12, []int64{1}, func(b []byte) []byte { return putVarint(b, 11, 4000000000) })
	checkI64(t, b, dtypeUint32, []int64{4000000000})
	// raw int32, little-endian.
	b = tensorProto(6, []int64{2}, func(b []byte) []byte { return putBytes(b, 9, []byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}) })
	checkI64(t, b, graph.Int32, []int64{1, -1})
	// A scalar.
	b = tensorProto(1, nil, func(b []byte) []byte { return putFloat(b, 4, 7) })
	checkF32(t, b, graph.Float32, []float32{7})
}

func checkF32(t *testing.T, b []byte, dt graph.DType, want []float32) {
	t.Helper()
	tn, err := DecodeTensor(b)
	if err != nil {
		t.Fatal(err)
	}
	if tn.DType != dt || !reflect.DeepEqual(tn.F32, want) || tn.I64 != nil {
		t.Errorf("got %s %v (I64 %v), want %s %v", tn.DType, tn.F32, tn.I64, dt, want)
	}
}

func checkI64(t *testing.T, b []byte, dt graph.DType, want []int64) {
	t.Helper()
	tn, err := DecodeTensor(b)
	if err != nil {
		t.Fatal(err)
	}
	if tn.DType != dt || !reflect.DeepEqual(tn.I64, want) || tn.F32 != nil {
		t.Errorf("got %s %v (F32 %v), want %s %v", tn.DType, tn.I64, tn.F32, dt, want)
	}
}

func TestDecodeErrors(t *testing.T) {
	model := func(gb []byte) []byte {
		var b []byte
		b = putVarint(b, 1, 8)
		b = putBytes(b, 7, gb)
		return putMessage(b, 8, func(b []byte) []byte { return putVarint(b, 2, 13) })
	}
	withInit := func(tb []byte) []byte { return model(putBytes(nil, 5, tb)) }
	external := tensorProto(1, []int64{4}, func(b []byte) []byte {
		b = putMessage(b, 13, func(b []byte) []byte {
			b = putString(b, 1, "location")
			return putString(b, 2, "weights.bin")
		})
		return putVarint(b, 14, 1)
	})
	subgraphs := model(putMessage(nil, 1, func(b []byte) []byte {
		b = putString(b, 4, "Foo")
		return putMessage(b, 5, func(b []byte) []byte {
			b = putString(b, 1, "branches")
			b = putBytes(b, 11, nil)
			return putVarint(b, 20, 10)
		})
	}))
	sequenceInput := model(putMessage(nil, 11, func(b []byte) []byte {
		b = putString(b, 1, "seq")
		return putMessage(b, 2, func(b []byte) []byte { return putBytes(b, 4, nil) })
	}))
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "no graph"},
		{"truncated", []byte{0x3a, 0x10, 0x01}, "field 7"},
		{"bad tag", []byte{0x00}, "bad tag"},
		{"wire type", putVarint(nil, 7, 1), "wire type"},
		{"external data", withInit(external), `external data (file "weights.bin")`},
		{"short raw", withInit(tensorProto(1, []int64{2}, func(b []byte) []byte { return putBytes(b, 9, []byte{1, 2, 3}) })), "needs 8 bytes"},
		{"count", withInit(tensorProto(1, []int64{3}, func(b []byte) []byte { return putFloat(b, 4, 1) })), "has 3 elements, data has 1"},
		{"huge", withInit(tensorProto(1, []int64{1 << 30, 1 << 30}, func(b []byte) []byte { return b })), "more than"},
		{"negative dim", withInit(tensorProto(1, []int64{-2}, func(b []byte) []byte { return b })), "negative dimension"},
		{"string tensor", withInit(tensorProto(8, []int64{1}, func(b []byte) []byte { return putString(b, 6, "x") })), "string tensors"},
		{"complex", withInit(tensorProto(14, []int64{1}, func(b []byte) []byte { return b })), "complex64"},
		{"subgraphs", subgraphs, "GRAPHS attributes are not supported"},
		{"sequence input", sequenceInput, "sequence types"},
		{"no op", model(putMessage(nil, 1, func(b []byte) []byte { return putString(b, 3, "n") })), "no op_type"},
	}
	for _, c := range cases {
		_, err := Decode(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	cases := []struct {
		name string
		g    *graph.Graph
		want string
	}{
		{"nil", nil, "no graph"},
		{"count", &graph.Graph{Initializers: []*graph.Tensor{{Name: "w", DType: graph.Float32, Dims: []int64{2}, F32: []float32{1}}}}, `initializer "w": float32[2] has 2 elements, F32 has 1`},
		{"kind", &graph.Graph{Nodes: []graph.Node{{Op: "Relu", Attrs: []graph.Attr{{Name: "a"}}}}}, `attribute "a": unknown kind 0`},
		{"dtype", &graph.Graph{Inputs: []graph.ValueInfo{{Name: "x"}}}, `input "x": no element type`},
		{"dim params", &graph.Graph{Inputs: []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 3}, DimParams: []string{"a", "b", "c"}}}}, "3 dim params for dims [-1 3]"},
		{"float ints", &graph.Graph{Initializers: []*graph.Tensor{{Name: "w", DType: graph.Int64, F32: []float32{1}}}}, "int64 tensor with float values"},
	}
	for _, c := range cases {
		_, err := Encode(c.g)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestCompactDimParams checks DimParams naming only the dynamic dims.
func TestCompactDimParams(t *testing.T) {
	g := sampleGraph()
	g.Inputs[0].DimParams = []string{"N"}
	b, err := Encode(g)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Inputs[0].DimParams, []string{"N", "", ""}) {
		t.Errorf("dim params %q", got.Inputs[0].DimParams)
	}
}

// TestInitializerInputs checks that inputs shadowed by initializers (old
// exporters list every weight as an input) are dropped.
func TestInitializerInputs(t *testing.T) {
	g := sampleGraph()
	g.Inputs = append(g.Inputs, graph.ValueInfo{Name: "w", DType: graph.Float32, Dims: []int64{3, 4}})
	b, err := Encode(g)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Inputs) != 2 {
		t.Errorf("inputs %v, want x and s only", got.Inputs)
	}
}

// testdataNodeDir is where Debian's libonnx-testdata keeps ONNX's node
// tests.
const testdataNodeDir = "/usr/share/libonnx-testdata/data/node"

// TestDecodeNodeTests decodes every model and tensor of ONNX's node tests:
// each decodes or fails with a "not supported" error, and each decoded
// model survives encode → decode unchanged.
func TestDecodeNodeTests(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join(testdataNodeDir, "test_*"))
	if len(dirs) == 0 {
		t.Skip("libonnx-testdata is not installed")
	}
	var decoded, unsupported int
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "model.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := DecodeModel(b)
		if err != nil {
			if !strings.Contains(err.Error(), "not supported") {
				t.Errorf("%s: %v", filepath.Base(dir), err)
			}
			unsupported++
			continue
		}
		decoded++
		eb, err := EncodeModel(m)
		if err != nil {
			t.Errorf("%s: encode: %v", filepath.Base(dir), err)
			continue
		}
		m2, err := DecodeModel(eb)
		if err != nil {
			t.Errorf("%s: decode again: %v", filepath.Base(dir), err)
			continue
		}
		if !reflect.DeepEqual(m.Graph, m2.Graph) || !reflect.DeepEqual(m.Opsets, m2.Opsets) {
			t.Errorf("%s: round trip differs", filepath.Base(dir))
		}
		pbs, _ := filepath.Glob(filepath.Join(dir, "test_data_set_*", "*.pb"))
		for _, pb := range pbs {
			tb, err := os.ReadFile(pb)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := DecodeTensor(tb); err != nil && !strings.Contains(err.Error(), "not supported") {
				t.Errorf("%s: %v", pb, err)
			}
		}
	}
	t.Logf("%d node-test models decoded, %d use features libml does not represent", decoded, unsupported)
	if decoded < len(dirs)*3/4 {
		t.Errorf("only %d of %d node-test models decoded", decoded, len(dirs))
	}
}

func FuzzDecode(f *testing.F) {
	b, err := Encode(sampleGraph())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)/2])
	for _, name := range []string{"test_conv_with_strides_padding", "test_gemm_all_attributes", "test_cast_FLOAT_to_FLOAT16"} {
		if mb, err := os.ReadFile(filepath.Join(testdataNodeDir, name, "model.onnx")); err == nil {
			f.Add(mb)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = DecodeSignature(b)
		_, _ = DecodeTensor(b)
		m, err := DecodeModel(b)
		if err != nil {
			return
		}
		// Whatever decodes must encode and decode again.
		eb, err := EncodeModel(m)
		if err != nil {
			t.Fatalf("decoded model does not encode: %v", err)
		}
		if _, err := DecodeModel(eb); err != nil {
			t.Fatalf("encoded model does not decode: %v", err)
		}
	})
}

// A file whose nodes are not in topological order (ONNX Runtime accepts
// them) decodes into a graph that is.
func TestDecodeSortsNodes(t *testing.T) {
	g := &graph.Graph{
		Name:    "unordered",
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{1, 4}}},
		Nodes: []graph.Node{
			{Name: "second", Op: "Sigmoid", Inputs: []string{"h"}, Outputs: []string{"y"}},
			{Name: "first", Op: "Relu", Inputs: []string{"x"}, Outputs: []string{"h"}},
		},
		Opset: 13,
	}
	b, err := Encode(g)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Nodes) != 2 || d.Nodes[0].Name != "first" || d.Nodes[1].Name != "second" {
		t.Fatalf("decoded order %q, %q; want first, second", d.Nodes[0].Name, d.Nodes[1].Name)
	}
}
