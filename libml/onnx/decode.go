// Package onnx reads and writes ONNX models (ModelProto) and tensors
// (TensorProto) as libml's graph IR, with protowire and no generated code.
//
// Decoding keeps what libml's engines can run: nodes with all the attribute
// kinds of graph.Attr, initializers (raw or typed data), and the graph's
// tensor inputs and outputs with their shapes. What libml cannot represent
// (sub-graphs, sparse tensors, string tensors, model-local functions,
// external weight files) is an error that says so, never a silent loss.
// Malformed bytes give errors, never panics.
package onnx

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strings"

	"sluice/libml/graph"
)

// Model is a decoded ModelProto: its graph and the model-level fields that
// matter for running it again.
type Model struct {
	// IRVersion is the ONNX IR version the model was saved with (0 when
	// encoding: chosen from the opset).
	IRVersion int64
	// Opsets maps each operator-set domain to its version; the default
	// ONNX domain is "" (also recorded in Graph.Opset).
	Opsets map[string]int64
	// ProducerName and ProducerVersion name the tool that wrote the model.
	ProducerName    string
	ProducerVersion string
	// Graph is the model's main graph.
	Graph *graph.Graph
}

// Limits that keep a hostile file from making the decoder allocate without
// bound: the element count of one tensor and the rank of a shape.
const (
	maxElements = 1 << 34
	maxRank     = 64
)

// ReadFile decodes the ONNX model in the file at path.
func ReadFile(path string) (*graph.Graph, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	g, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}

// Decode decodes a serialized ModelProto into a graph.
func Decode(b []byte) (*graph.Graph, error) {
	m, err := DecodeModel(b)
	if err != nil {
		return nil, err
	}
	return m.Graph, nil
}

// DecodeModel decodes a serialized ModelProto.
//
// Graph inputs that are also initializers (as older exporters write them)
// are dropped from Graph.Inputs, so Inputs lists only what a caller must
// feed. An input or output shape missing altogether leaves Dims nil; a
// scalar has an empty, non-nil Dims.
func DecodeModel(b []byte) (*Model, error) {
	m := &Model{Opsets: map[string]int64{}}
	var graphBytes []byte
	haveGraph := false
	type fnKey struct{ domain, name string }
	functions := map[fnKey]bool{}
	err := eachField(b, func(f field) error {
		var err error
		switch f.num {
		case 1: // ir_version
			m.IRVersion, err = f.int64()
		case 2: // producer_name
			m.ProducerName, err = f.str()
		case 3: // producer_version
			m.ProducerVersion, err = f.str()
		case 7: // graph
			graphBytes, err = f.bytes()
			haveGraph = true
		case 8: // opset_import
			var ob []byte
			if ob, err = f.bytes(); err != nil {
				return err
			}
			domain, version, err := decodeOpset(ob)
			if err != nil {
				return fmt.Errorf("opset_import: %w", err)
			}
			if domain == "ai.onnx" {
				domain = ""
			}
			m.Opsets[domain] = version
		case 25: // functions
			var fb []byte
			if fb, err = f.bytes(); err != nil {
				return err
			}
			var k fnKey
			err = eachField(fb, func(f field) error {
				var err error
				switch f.num {
				case 1:
					k.name, err = f.str()
				case 10:
					k.domain, err = f.str()
				}
				return err
			})
			functions[k] = true
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("onnx: model: %w", err)
	}
	if !haveGraph {
		return nil, fmt.Errorf("onnx: model has no graph")
	}
	g, err := decodeGraph(graphBytes)
	if err != nil {
		return nil, fmt.Errorf("onnx: graph: %w", err)
	}
	if len(m.Opsets) == 0 {
		// IR versions before opset_import existed mean opset 1.
		m.Opsets[""] = 1
	}
	g.Opset = m.Opsets[""]
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if functions[fnKey{n.Domain, n.Op}] {
			return nil, fmt.Errorf("onnx: node %q: model-local function %s.%s is not supported", n.Name, n.Domain, n.Op)
		}
	}
	m.Graph = g
	return m, nil
}

func decodeOpset(b []byte) (domain string, version int64, err error) {
	err = eachField(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			domain, err = f.str()
		case 2:
			version, err = f.int64()
		}
		return err
	})
	return domain, version, err
}

func decodeGraph(b []byte) (*graph.Graph, error) {
	g := &graph.Graph{}
	err := eachField(b, func(f field) error {
		var err error
		switch f.num {
		case 1: // node
			var nb []byte
			if nb, err = f.bytes(); err != nil {
				return err
			}
			n, err := decodeNode(nb)
			if err != nil {
				return fmt.Errorf("node %d (%q): %w", len(g.Nodes), n.Name, err)
			}
			g.Nodes = append(g.Nodes, n)
		case 2: // name
			g.Name, err = f.str()
		case 5: // initializer
			var tb []byte
			if tb, err = f.bytes(); err != nil {
				return err
			}
			t, err := decodeTensor(tb)
			if err != nil {
				return fmt.Errorf("initializer %d: %w", len(g.Initializers), err)
			}
			g.Initializers = append(g.Initializers, t)
		case 11, 12: // input, output
			var vb []byte
			if vb, err = f.bytes(); err != nil {
				return err
			}
			vi, err := decodeValueInfo(vb)
			if err != nil {
				return err
			}
			if f.num == 11 {
				g.Inputs = append(g.Inputs, vi)
			} else {
				g.Outputs = append(g.Outputs, vi)
			}
		case 15: // sparse_initializer
			return fmt.Errorf("sparse initializers are not supported")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	init := make(map[string]bool, len(g.Initializers))
	for _, t := range g.Initializers {
		if init[t.Name] {
			return nil, fmt.Errorf("initializer %q defined twice", t.Name)
		}
		init[t.Name] = true
	}
	inputs := g.Inputs[:0]
	for _, vi := range g.Inputs {
		if !init[vi.Name] {
			inputs = append(inputs, vi)
		}
	}
	g.Inputs = inputs
	if err := g.SortNodes(); err != nil {
		return nil, err
	}
	return g, nil
}

func decodeNode(b []byte) (graph.Node, error) {
	var n graph.Node
	err := eachField(b, func(f field) error {
		var err error
		var s string
		switch f.num {
		case 1: // input
			if s, err = f.str(); err == nil {
				n.Inputs = append(n.Inputs, s)
			}
		case 2: // output
			if s, err = f.str(); err == nil {
				n.Outputs = append(n.Outputs, s)
			}
		case 3:
			n.Name, err = f.str()
		case 4:
			n.Op, err = f.str()
		case 7:
			n.Domain, err = f.str()
		case 5: // attribute
			var ab []byte
			if ab, err = f.bytes(); err != nil {
				return err
			}
			a, err := decodeAttr(ab)
			if err != nil {
				return fmt.Errorf("attribute %q: %w", a.Name, err)
			}
			n.Attrs = append(n.Attrs, a)
		}
		return err
	})
	if err != nil {
		return n, err
	}
	if n.Op == "" {
		return n, fmt.Errorf("no op_type")
	}
	if n.Domain == "ai.onnx" {
		n.Domain = ""
	}
	return n, nil
}

// attrTypeName names ONNX attribute types libml does not represent.
var attrTypeName = map[int64]string{
	9: "TENSORS", 10: "GRAPHS", 11: "SPARSE_TENSOR",
	12: "SPARSE_TENSORS", 13: "TYPE_PROTO", 14: "TYPE_PROTOS",
}

func decodeAttr(b []byte) (graph.Attr, error) {
	var a graph.Attr
	var kind int64
	// Which value fields were present, to infer the kind of attributes
	// written before AttributeProto.type existed.
	var hasF, hasI, hasS, hasT, hasG, hasFloats, hasInts, hasStrings, hasOther bool
	var tb, gb []byte
	err := eachField(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			a.Name, err = f.str()
		case 20:
			kind, err = f.int64()
		case 21:
			return fmt.Errorf("ref_attr_name is only valid inside functions")
		case 2:
			a.F, err = f.float32()
			hasF = true
		case 3:
			a.I, err = f.int64()
			hasI = true
		case 4:
			a.S, err = f.str()
			hasS = true
		case 5:
			tb, err = f.bytes()
			hasT = true
		case 6:
			if gb, err = f.bytes(); err == nil {
				hasG = true
			}
		case 7:
			var u []uint32
			if u, err = f.appendFixed32(nil); err == nil {
				for _, v := range u {
					a.Floats = append(a.Floats, math.Float32frombits(v))
				}
			}
			hasFloats = true
		case 8:
			a.Ints, err = f.appendVarints(a.Ints)
			hasInts = true
		case 9:
			var s string
			if s, err = f.str(); err == nil {
				a.Strings = append(a.Strings, s)
			}
			hasStrings = true
		case 10, 11, 22, 23, 14, 15:
			hasOther = true
		}
		return err
	})
	if err != nil {
		return a, err
	}
	if a.Name == "" {
		return a, fmt.Errorf("attribute without a name")
	}
	if kind == 0 {
		switch {
		case hasG:
			kind = 5
		case hasOther:
			kind = 9
		case hasFloats:
			kind = int64(graph.AttrFloats)
		case hasInts:
			kind = int64(graph.AttrInts)
		case hasStrings:
			kind = int64(graph.AttrStrings)
		case hasT:
			kind = int64(graph.AttrTensor)
		case hasF:
			kind = int64(graph.AttrFloat)
		case hasI:
			kind = int64(graph.AttrInt)
		case hasS:
			kind = int64(graph.AttrString)
		default:
			return a, fmt.Errorf("no type and no value")
		}
	}
	switch graph.AttrKind(kind) {
	case graph.AttrFloat, graph.AttrInt, graph.AttrString, graph.AttrFloats, graph.AttrInts, graph.AttrStrings:
	case graph.AttrTensor:
		if !hasT {
			return a, fmt.Errorf("TENSOR attribute without a tensor")
		}
		t, err := decodeTensor(tb)
		if err != nil {
			return a, err
		}
		a.T = t
	case graph.AttrGraph:
		if !hasG {
			return a, fmt.Errorf("GRAPH attribute without a graph")
		}
		g, err := decodeGraph(gb)
		if err != nil {
			if strings.Contains(err.Error(), "no type") {
				// sub-graphs may leave their values untyped (Loop
				// bodies): libml types every value
				return a, fmt.Errorf("sub-graphs with untyped values are not supported: %w", err)
			}
			return a, fmt.Errorf("sub-graph: %w", err)
		}
		a.G = g
	default:
		if name, ok := attrTypeName[kind]; ok {
			return a, fmt.Errorf("%s attributes are not supported", name)
		}
		return a, fmt.Errorf("unknown attribute type %d", kind)
	}
	a.Kind = graph.AttrKind(kind)
	return a, nil
}

func decodeValueInfo(b []byte) (graph.ValueInfo, error) {
	var vi graph.ValueInfo
	var typeBytes []byte
	hasType := false
	err := eachField(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			vi.Name, err = f.str()
		case 2:
			typeBytes, err = f.bytes()
			hasType = true
		}
		return err
	})
	if err != nil {
		return vi, fmt.Errorf("value %q: %w", vi.Name, err)
	}
	if vi.Name == "" {
		return vi, fmt.Errorf("graph input or output without a name")
	}
	if !hasType {
		return vi, fmt.Errorf("value %q: no type", vi.Name)
	}
	err = eachField(typeBytes, func(f field) error {
		switch f.num {
		case 1: // tensor_type
			tb, err := f.bytes()
			if err != nil {
				return err
			}
			return decodeTensorType(tb, &vi)
		case 4:
			return fmt.Errorf("sequence types are not supported (tensors only)")
		case 5:
			return fmt.Errorf("map types are not supported (tensors only)")
		case 8:
			return fmt.Errorf("sparse tensor types are not supported (tensors only)")
		case 9:
			return fmt.Errorf("optional types are not supported (tensors only)")
		}
		return nil
	})
	if err != nil {
		return vi, fmt.Errorf("value %q: %w", vi.Name, err)
	}
	if vi.DType == graph.Undefined {
		return vi, fmt.Errorf("value %q: no tensor element type", vi.Name)
	}
	return vi, nil
}

func decodeTensorType(b []byte, vi *graph.ValueInfo) error {
	return eachField(b, func(f field) error {
		switch f.num {
		case 1: // elem_type
			t, err := f.int64()
			if err != nil {
				return err
			}
			vi.DType = graph.DType(t)
		case 2: // shape
			sb, err := f.bytes()
			if err != nil {
				return err
			}
			vi.Dims = []int64{}
			var params []string
			anyParam := false
			err = eachField(sb, func(f field) error {
				if f.num != 1 {
					return nil
				}
				db, err := f.bytes()
				if err != nil {
					return err
				}
				if len(vi.Dims) >= maxRank {
					return fmt.Errorf("rank above %d", maxRank)
				}
				d, p, err := decodeDim(db)
				if err != nil {
					return err
				}
				vi.Dims = append(vi.Dims, d)
				params = append(params, p)
				anyParam = anyParam || p != ""
				return nil
			})
			if err != nil {
				return fmt.Errorf("shape: %w", err)
			}
			if anyParam {
				vi.DimParams = params
			}
		}
		return nil
	})
}

// decodeDim returns a dimension's size (-1 when it is not a fixed size) and
// its symbolic name.
func decodeDim(b []byte) (int64, string, error) {
	d := int64(-1)
	var p string
	err := eachField(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			d, err = f.int64()
			if d < 0 {
				d = -1
			}
		case 2:
			p, err = f.str()
			d = -1
		}
		return err
	})
	return d, p, err
}

// DecodeTensor decodes a serialized TensorProto (such as the input_N.pb and
// output_N.pb files of ONNX's node tests).
//
// Float types (float32, float16, bfloat16, float64) are returned in F32 with
// their DType kept (float64 loses precision); integer types and bool in I64
// (uint64 values above 2^63 wrap). String, complex and 8/4-bit float tensors
// and tensors kept in external files are errors.
func DecodeTensor(b []byte) (*graph.Tensor, error) {
	t, err := decodeTensor(b)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	return t, nil
}

func decodeTensor(b []byte) (*graph.Tensor, error) {
	t := &graph.Tensor{}
	var (
		dtype                     int64
		floats                    []uint32
		int32s, int64s, uint64s   []int64
		doubles                   []uint64
		raw                       []byte
		hasRaw, hasStrings        bool
		external, hasSegment      bool
		location, externalDetails string
	)
	err := eachField(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			if len(t.Dims) >= maxRank {
				return fmt.Errorf("rank above %d", maxRank)
			}
			t.Dims, err = f.appendVarints(t.Dims)
		case 2:
			dtype, err = f.int64()
		case 3:
			hasSegment = true
		case 4:
			floats, err = f.appendFixed32(floats)
		case 5:
			int32s, err = f.appendVarints(int32s)
		case 6:
			hasStrings = true
		case 7:
			int64s, err = f.appendVarints(int64s)
		case 8:
			t.Name, err = f.str()
		case 9:
			raw, err = f.bytes()
			hasRaw = true
		case 10:
			doubles, err = f.appendFixed64(doubles)
		case 11:
			uint64s, err = f.appendVarints(uint64s)
		case 13: // external_data: key/value entries
			external = true
			var eb []byte
			if eb, err = f.bytes(); err != nil {
				return err
			}
			var k, v string
			err = eachField(eb, func(f field) error {
				var err error
				switch f.num {
				case 1:
					k, err = f.str()
				case 2:
					v, err = f.str()
				}
				return err
			})
			if k == "location" {
				location = v
			}
			externalDetails += " " + k + "=" + v
		case 14:
			var loc int64
			loc, err = f.int64()
			external = external || loc == 1
		}
		return err
	})
	if err != nil {
		return t, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if len(t.Dims) > maxRank {
		return t, fmt.Errorf("tensor %q: rank %d above %d", t.Name, len(t.Dims), maxRank)
	}
	t.DType = graph.DType(dtype)
	if external {
		if location != "" {
			return t, fmt.Errorf("tensor %q: external data (file %q) is not supported; save the model with its weights inside", t.Name, location)
		}
		return t, fmt.Errorf("tensor %q: external data (%s) is not supported; save the model with its weights inside", t.Name, externalDetails)
	}
	if hasSegment {
		return t, fmt.Errorf("tensor %q: segmented tensors are not supported", t.Name)
	}
	n := int64(1)
	for _, d := range t.Dims {
		if d < 0 {
			return t, fmt.Errorf("tensor %q: negative dimension in %v", t.Name, t.Dims)
		}
		if d != 0 && n > maxElements/d {
			return t, fmt.Errorf("tensor %q: more than %d elements in %v", t.Name, int64(maxElements), t.Dims)
		}
		n *= d
	}
	typed := len(floats) + len(int32s) + len(int64s) + len(uint64s) + len(doubles)
	if hasRaw && typed > 0 {
		return t, fmt.Errorf("tensor %q: both raw_data and typed data", t.Name)
	}
	size, ok := elemSize[t.DType]
	if !ok {
		switch t.DType {
		case 8:
			return t, fmt.Errorf("tensor %q: string tensors are not supported", t.Name)
		case graph.Undefined:
			return t, fmt.Errorf("tensor %q: no data type", t.Name)
		}
		return t, fmt.Errorf("tensor %q: data type %s is not supported", t.Name, dtypeName(t.DType))
	}
	if hasStrings {
		return t, fmt.Errorf("tensor %q: string_data in a %s tensor", t.Name, t.DType)
	}
	count := func(got int) error {
		if int64(got) != n {
			return fmt.Errorf("tensor %q: %s%v has %d elements, data has %d", t.Name, t.DType, t.Dims, n, got)
		}
		return nil
	}
	if hasRaw {
		if int64(len(raw)) != n*int64(size) {
			return t, fmt.Errorf("tensor %q: %s%v needs %d bytes of raw_data, has %d", t.Name, t.DType, t.Dims, n*int64(size), len(raw))
		}
		decodeRaw(t, raw, int(n))
		return t, nil
	}
	switch t.DType {
	case graph.Float32:
		if err := count(len(floats)); err != nil {
			return t, err
		}
		t.F32 = make([]float32, n)
		for i, v := range floats {
			t.F32[i] = math.Float32frombits(v)
		}
	case graph.Float64:
		if err := count(len(doubles)); err != nil {
			return t, err
		}
		t.F32 = make([]float32, n)
		for i, v := range doubles {
			t.F32[i] = float32(math.Float64frombits(v))
		}
	case graph.Float16, dtypeBFloat16:
		if err := count(len(int32s)); err != nil {
			return t, err
		}
		t.F32 = make([]float32, n)
		for i, v := range int32s {
			t.F32[i] = halfToFloat32(t.DType, uint16(v))
		}
	case graph.Int64:
		if err := count(len(int64s)); err != nil {
			return t, err
		}
		t.I64 = int64s
	case dtypeUint32, dtypeUint64:
		if err := count(len(uint64s)); err != nil {
			return t, err
		}
		t.I64 = uint64s
		if t.DType == dtypeUint32 {
			for i, v := range t.I64 {
				t.I64[i] = int64(uint32(v))
			}
		}
	default: // 8-, 16- and 32-bit integers and bool live in int32_data
		if err := count(len(int32s)); err != nil {
			return t, err
		}
		t.I64 = int32s
		for i, v := range t.I64 {
			t.I64[i] = narrowInt(t.DType, v)
		}
	}
	if n == 0 {
		t.F32, t.I64 = emptyLike(t)
	}
	return t, nil
}

// ONNX data types that graph.DType has no constant for.
const (
	dtypeUint16   graph.DType = 4
	dtypeInt16    graph.DType = 5
	dtypeUint32   graph.DType = 12
	dtypeUint64   graph.DType = 13
	dtypeBFloat16 graph.DType = 16
)

// elemSize is the raw_data element size of every data type libml decodes.
var elemSize = map[graph.DType]int{
	graph.Float32: 4, graph.Uint8: 1, graph.Int8: 1, dtypeUint16: 2,
	dtypeInt16: 2, graph.Int32: 4, graph.Int64: 8, graph.Bool: 1,
	graph.Float16: 2, graph.Float64: 8, dtypeUint32: 4, dtypeUint64: 8,
	dtypeBFloat16: 2,
}

func isFloat(d graph.DType) bool {
	return d == graph.Float32 || d == graph.Float16 || d == graph.Float64 || d == dtypeBFloat16
}

func dtypeName(d graph.DType) string {
	switch d {
	case dtypeUint16:
		return "uint16"
	case dtypeInt16:
		return "int16"
	case 8:
		return "string"
	case dtypeUint32:
		return "uint32"
	case dtypeUint64:
		return "uint64"
	case 14:
		return "complex64"
	case 15:
		return "complex128"
	case dtypeBFloat16:
		return "bfloat16"
	}
	return d.String()
}

func halfToFloat32(d graph.DType, h uint16) float32 {
	if d == dtypeBFloat16 {
		return math.Float32frombits(uint32(h) << 16)
	}
	return Float16ToFloat32(h)
}

// narrowInt reduces a value from int32_data to the range of its type.
func narrowInt(d graph.DType, v int64) int64 {
	switch d {
	case graph.Uint8:
		return int64(uint8(v))
	case graph.Int8:
		return int64(int8(v))
	case dtypeUint16:
		return int64(uint16(v))
	case dtypeInt16:
		return int64(int16(v))
	case graph.Int32:
		return int64(int32(v))
	case graph.Bool:
		if v != 0 {
			return 1
		}
		return 0
	}
	return v
}

// emptyLike returns the empty, non-nil slice a zero-element tensor of t's
// type keeps its values in.
func emptyLike(t *graph.Tensor) ([]float32, []int64) {
	if isFloat(t.DType) {
		return []float32{}, nil
	}
	return nil, []int64{}
}

// decodeRaw fills t from little-endian raw_data holding n elements of t's
// type; the length has been checked.
func decodeRaw(t *graph.Tensor, raw []byte, n int) {
	le := binary.LittleEndian
	if isFloat(t.DType) {
		t.F32 = make([]float32, n)
		for i := range t.F32 {
			switch t.DType {
			case graph.Float32:
				t.F32[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
			case graph.Float64:
				t.F32[i] = float32(math.Float64frombits(le.Uint64(raw[8*i:])))
			default:
				t.F32[i] = halfToFloat32(t.DType, le.Uint16(raw[2*i:]))
			}
		}
		return
	}
	t.I64 = make([]int64, n)
	for i := range t.I64 {
		var v int64
		switch t.DType {
		case graph.Uint8:
			v = int64(raw[i])
		case graph.Int8:
			v = int64(int8(raw[i]))
		case graph.Bool:
			if raw[i] != 0 {
				v = 1
			}
		case dtypeUint16:
			v = int64(le.Uint16(raw[2*i:]))
		case dtypeInt16:
			v = int64(int16(le.Uint16(raw[2*i:])))
		case graph.Int32:
			v = int64(int32(le.Uint32(raw[4*i:])))
		case dtypeUint32:
			v = int64(le.Uint32(raw[4*i:]))
		case graph.Int64, dtypeUint64:
			v = int64(le.Uint64(raw[8*i:]))
		}
		t.I64[i] = v
	}
}

// DecodeSignature reads only a model's graph inputs and outputs, skipping
// nodes and weights, so it works on models whose operators libml cannot
// represent (control flow, say) and costs no copy of the weights. Inputs
// that are initializers are dropped, as in DecodeModel.
func DecodeSignature(b []byte) (inputs, outputs []graph.ValueInfo, err error) {
	var graphBytes []byte
	haveGraph := false
	err = eachField(b, func(f field) error {
		if f.num != 7 {
			return nil
		}
		var err error
		graphBytes, err = f.bytes()
		haveGraph = true
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("onnx: model: %w", err)
	}
	if !haveGraph {
		return nil, nil, fmt.Errorf("onnx: model has no graph")
	}
	init := map[string]bool{}
	err = eachField(graphBytes, func(f field) error {
		switch f.num {
		case 5: // initializer: only its name
			tb, err := f.bytes()
			if err != nil {
				return err
			}
			return eachField(tb, func(f field) error {
				if f.num == 8 {
					name, err := f.str()
					init[name] = true
					return err
				}
				return nil
			})
		case 11, 12:
			vb, err := f.bytes()
			if err != nil {
				return err
			}
			vi, err := decodeValueInfo(vb)
			if err != nil {
				return err
			}
			if f.num == 11 {
				inputs = append(inputs, vi)
			} else {
				outputs = append(outputs, vi)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("onnx: graph: %w", err)
	}
	kept := inputs[:0]
	for _, vi := range inputs {
		if !init[vi.Name] {
			kept = append(kept, vi)
		}
	}
	return kept, outputs, nil
}
