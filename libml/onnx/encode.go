package onnx

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"sluice/libml/graph"
)

// DefaultOpset is the default-domain opset written for a graph whose Opset
// is zero.
const DefaultOpset = 17

// ProducerName is written into every model this package encodes.
const ProducerName = "sluice"

// Encode serializes g as an ONNX ModelProto that ONNX Runtime can load.
// The IR version is chosen from g.Opset (DefaultOpset when zero and the
// graph has default-domain nodes); nodes in other domains get an opset
// import of version 1 for their domain.
func Encode(g *graph.Graph) ([]byte, error) {
	return EncodeModel(&Model{Graph: g})
}

// EncodeModel serializes m. Zero fields are filled in: IRVersion from the
// default-domain opset, Opsets[""] from Graph.Opset (else DefaultOpset when
// a node needs it), version 1 for node domains m.Opsets does not name.
func EncodeModel(m *Model) ([]byte, error) {
	g := m.Graph
	if g == nil {
		return nil, fmt.Errorf("onnx: encode: no graph")
	}
	opsets := map[string]int64{}
	for d, v := range m.Opsets {
		if d == "ai.onnx" {
			d = ""
		}
		opsets[d] = v
	}
	if g.Opset > 0 {
		opsets[""] = g.Opset
	}
	usesDefault := len(g.Nodes) == 0
	for i := range g.Nodes {
		d := g.Nodes[i].Domain
		if d == "ai.onnx" {
			d = ""
		}
		if d == "" {
			usesDefault = true
		} else if _, ok := opsets[d]; !ok {
			opsets[d] = 1
		}
	}
	if opsets[""] == 0 {
		if usesDefault {
			opsets[""] = DefaultOpset
		} else {
			delete(opsets, "")
		}
	}
	ir := m.IRVersion
	if ir == 0 {
		ir = irVersionFor(opsets[""])
	}
	producer := m.ProducerName
	if producer == "" {
		producer = ProducerName
	}

	gb, err := encodeGraph(g)
	if err != nil {
		return nil, fmt.Errorf("onnx: encode: %w", err)
	}
	var b []byte
	b = putVarint(b, 1, ir)
	b = putString(b, 2, producer)
	b = putStringNonEmpty(b, 3, m.ProducerVersion)
	b = putBytes(b, 7, gb)
	domains := make([]string, 0, len(opsets))
	for d := range opsets {
		domains = append(domains, d)
	}
	sort.Strings(domains)
	for _, d := range domains {
		b = putMessage(b, 8, func(ob []byte) []byte {
			ob = putStringNonEmpty(ob, 1, d)
			return putVarint(ob, 2, opsets[d])
		})
	}
	return b, nil
}

// irVersionFor is the IR version that ONNX released with the given default
// opset (onnx.helper.VERSION_TABLE), at least 4 so that initializers need
// not be listed as graph inputs.
func irVersionFor(opset int64) int64 {
	switch {
	case opset == 0: // no default-domain nodes
		return 8
	case opset <= 9:
		return 4
	case opset == 10:
		return 5
	case opset == 11:
		return 6
	case opset <= 14:
		return 7
	case opset <= 18:
		return 8
	case opset <= 20:
		return 9
	case opset <= 22:
		return 10
	}
	return 11
}

func encodeGraph(g *graph.Graph) ([]byte, error) {
	var b []byte
	for i := range g.Nodes {
		n := &g.Nodes[i]
		nb, err := encodeNode(n)
		if err != nil {
			return nil, fmt.Errorf("node %d (%q, %s): %w", i, n.Name, n.Op, err)
		}
		b = putBytes(b, 1, nb)
	}
	name := g.Name
	if name == "" {
		name = "graph"
	}
	b = putString(b, 2, name)
	for i, t := range g.Initializers {
		if t == nil {
			return nil, fmt.Errorf("initializer %d is nil", i)
		}
		tb, err := encodeTensor(t)
		if err != nil {
			return nil, fmt.Errorf("initializer %q: %w", t.Name, err)
		}
		b = putBytes(b, 5, tb)
	}
	for i := range g.Inputs {
		vb, err := encodeValueInfo(&g.Inputs[i])
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", g.Inputs[i].Name, err)
		}
		b = putBytes(b, 11, vb)
	}
	for i := range g.Outputs {
		vb, err := encodeValueInfo(&g.Outputs[i])
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", g.Outputs[i].Name, err)
		}
		b = putBytes(b, 12, vb)
	}
	return b, nil
}

func encodeNode(n *graph.Node) ([]byte, error) {
	if n.Op == "" {
		return nil, fmt.Errorf("no op")
	}
	var b []byte
	for _, s := range n.Inputs {
		b = putString(b, 1, s)
	}
	for _, s := range n.Outputs {
		b = putString(b, 2, s)
	}
	b = putStringNonEmpty(b, 3, n.Name)
	b = putString(b, 4, n.Op)
	for i := range n.Attrs {
		a := &n.Attrs[i]
		ab, err := encodeAttr(a)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", a.Name, err)
		}
		b = putBytes(b, 5, ab)
	}
	if n.Domain != "" && n.Domain != "ai.onnx" {
		b = putString(b, 7, n.Domain)
	}
	return b, nil
}

func encodeAttr(a *graph.Attr) ([]byte, error) {
	if a.Name == "" {
		return nil, fmt.Errorf("no name")
	}
	var b []byte
	b = putString(b, 1, a.Name)
	switch a.Kind {
	case graph.AttrFloat:
		b = putFloat(b, 2, a.F)
	case graph.AttrInt:
		b = putVarint(b, 3, a.I)
	case graph.AttrString:
		b = putString(b, 4, a.S)
	case graph.AttrTensor:
		if a.T == nil {
			return nil, fmt.Errorf("tensor attribute without a tensor")
		}
		tb, err := encodeTensor(a.T)
		if err != nil {
			return nil, err
		}
		b = putBytes(b, 5, tb)
	case graph.AttrGraph:
		if a.G == nil {
			return nil, fmt.Errorf("graph attribute without a graph")
		}
		gb, err := encodeGraph(a.G)
		if err != nil {
			return nil, fmt.Errorf("sub-graph: %w", err)
		}
		b = putBytes(b, 6, gb)
	case graph.AttrFloats:
		for _, v := range a.Floats {
			b = putFloat(b, 7, v)
		}
	case graph.AttrInts:
		for _, v := range a.Ints {
			b = putVarint(b, 8, v)
		}
	case graph.AttrStrings:
		for _, s := range a.Strings {
			b = putString(b, 9, s)
		}
	default:
		return nil, fmt.Errorf("unknown kind %d", a.Kind)
	}
	b = putVarint(b, 20, int64(a.Kind))
	return b, nil
}

func encodeValueInfo(vi *graph.ValueInfo) ([]byte, error) {
	if vi.Name == "" {
		return nil, fmt.Errorf("no name")
	}
	if vi.DType == graph.Undefined {
		return nil, fmt.Errorf("no element type")
	}
	params, err := dimParams(vi)
	if err != nil {
		return nil, err
	}
	tensorType := func(tb []byte) []byte {
		tb = putVarint(tb, 1, int64(vi.DType))
		if vi.Dims == nil {
			return tb
		}
		return putMessage(tb, 2, func(sb []byte) []byte {
			// An empty shape message still marks a scalar: write the
			// field even with no dims.
			for i, d := range vi.Dims {
				sb = putMessage(sb, 1, func(db []byte) []byte {
					switch {
					case d >= 0:
						return putVarint(db, 1, d)
					case params != nil && params[i] != "":
						return putString(db, 2, params[i])
					}
					return db
				})
			}
			return sb
		})
	}
	var b []byte
	b = putString(b, 1, vi.Name)
	b = putMessage(b, 2, func(tb []byte) []byte {
		return putMessage(tb, 1, tensorType)
	})
	return b, nil
}

// dimParams returns vi's symbolic dimension names parallel to its Dims.
// DimParams may be parallel to Dims already, or name just the dynamic
// dimensions in order (as the zoo writes {"batch"} for [-1 3 224 224]).
func dimParams(vi *graph.ValueInfo) ([]string, error) {
	if vi.DimParams == nil || len(vi.DimParams) == len(vi.Dims) {
		return vi.DimParams, nil
	}
	params := make([]string, len(vi.Dims))
	k := 0
	for i, d := range vi.Dims {
		if d < 0 && k < len(vi.DimParams) {
			params[i] = vi.DimParams[k]
			k++
		}
	}
	if k != len(vi.DimParams) {
		return nil, fmt.Errorf("%d dim params for dims %v", len(vi.DimParams), vi.Dims)
	}
	return params, nil
}

// EncodeTensor serializes t as a TensorProto (raw_data, little-endian).
func EncodeTensor(t *graph.Tensor) ([]byte, error) {
	b, err := encodeTensor(t)
	if err != nil {
		return nil, fmt.Errorf("onnx: tensor %q: %w", t.Name, err)
	}
	return b, nil
}

func encodeTensor(t *graph.Tensor) ([]byte, error) {
	dtype := t.DType
	if dtype == graph.Undefined {
		switch {
		case t.F32 != nil:
			dtype = graph.Float32
		case t.I64 != nil:
			dtype = graph.Int64
		default:
			return nil, fmt.Errorf("no data type")
		}
	}
	size, ok := elemSize[dtype]
	if !ok {
		return nil, fmt.Errorf("data type %s is not supported", dtypeName(dtype))
	}
	n := int64(1)
	for _, d := range t.Dims {
		if d < 0 {
			return nil, fmt.Errorf("negative dimension in %v", t.Dims)
		}
		n *= d
	}
	var raw []byte
	switch {
	case len(t.Raw) > 0 || (t.F32 == nil && t.I64 == nil):
		raw = t.Raw
		if int64(len(raw)) != n*int64(size) {
			return nil, fmt.Errorf("%s%v needs %d raw bytes, has %d", dtypeName(dtype), t.Dims, n*int64(size), len(raw))
		}
	case t.F32 != nil:
		if !isFloat(dtype) {
			return nil, fmt.Errorf("%s tensor with float values", dtypeName(dtype))
		}
		if int64(len(t.F32)) != n {
			return nil, fmt.Errorf("%s%v has %d elements, F32 has %d", dtypeName(dtype), t.Dims, n, len(t.F32))
		}
		raw = encodeFloats(dtype, t.F32)
	default:
		if isFloat(dtype) {
			return nil, fmt.Errorf("%s tensor with integer values", dtypeName(dtype))
		}
		if int64(len(t.I64)) != n {
			return nil, fmt.Errorf("%s%v has %d elements, I64 has %d", dtypeName(dtype), t.Dims, n, len(t.I64))
		}
		raw = encodeInts(dtype, size, t.I64)
	}
	var b []byte
	for _, d := range t.Dims {
		b = putVarint(b, 1, d)
	}
	b = putVarint(b, 2, int64(dtype))
	b = putStringNonEmpty(b, 8, t.Name)
	b = putBytes(b, 9, raw)
	return b, nil
}

func encodeFloats(dtype graph.DType, vs []float32) []byte {
	le := binary.LittleEndian
	size := elemSize[dtype]
	raw := make([]byte, size*len(vs))
	for i, v := range vs {
		switch dtype {
		case graph.Float32:
			le.PutUint32(raw[4*i:], math.Float32bits(v))
		case graph.Float64:
			le.PutUint64(raw[8*i:], math.Float64bits(float64(v)))
		case graph.Float16:
			le.PutUint16(raw[2*i:], Float32ToFloat16(v))
		case dtypeBFloat16:
			le.PutUint16(raw[2*i:], float32ToBFloat16(v))
		}
	}
	return raw
}

func float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 // NaN stays a NaN
	}
	// Round to nearest even.
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func encodeInts(dtype graph.DType, size int, vs []int64) []byte {
	le := binary.LittleEndian
	raw := make([]byte, size*len(vs))
	for i, v := range vs {
		switch size {
		case 1:
			if dtype == graph.Bool && v != 0 {
				v = 1
			}
			raw[i] = byte(v)
		case 2:
			le.PutUint16(raw[2*i:], uint16(v))
		case 4:
			le.PutUint32(raw[4*i:], uint32(v))
		case 8:
			le.PutUint64(raw[8*i:], uint64(v))
		}
	}
	return raw
}
