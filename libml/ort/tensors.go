package ort

import (
	"encoding/binary"
	"fmt"
	"math"

	ortgo "github.com/yalue/onnxruntime_go"

	"sluice/libml/graph"
	"sluice/libml/onnx"
)

// ONNX element types graph.DType has no constant for (ONNX numbering).
const (
	dtUint16   graph.DType = 4
	dtInt16    graph.DType = 5
	dtUint32   graph.DType = 12
	dtUint64   graph.DType = 13
	dtBFloat16 graph.DType = 16
)

// newValue makes an ONNX Runtime value holding t's elements as dtype (the
// type the model expects). The value must be destroyed by the caller.
func newValue(t *graph.Tensor, dtype graph.DType) (ortgo.Value, error) {
	shape := ortgo.Shape(append([]int64(nil), t.Dims...))
	n := t.NumElements()
	have := int64(len(t.F32))
	if t.F32 == nil {
		have = int64(len(t.I64))
	}
	if have != n {
		return nil, fmt.Errorf("tensor %q: %v needs %d elements, has %d", t.Name, t.Dims, n, have)
	}
	if len(shape) == 0 {
		return newScalar(t, dtype)
	}
	switch dtype {
	case graph.Float32:
		return ortgo.NewTensor(shape, floats[float32](t))
	case graph.Float64:
		return ortgo.NewTensor(shape, floats[float64](t))
	case graph.Int64:
		return ortgo.NewTensor(shape, ints[int64](t))
	case graph.Int32:
		return ortgo.NewTensor(shape, ints[int32](t))
	case graph.Int8:
		return ortgo.NewTensor(shape, ints[int8](t))
	case graph.Uint8:
		return ortgo.NewTensor(shape, ints[uint8](t))
	case dtInt16:
		return ortgo.NewTensor(shape, ints[int16](t))
	case dtUint16:
		return ortgo.NewTensor(shape, ints[uint16](t))
	case dtUint32:
		return ortgo.NewTensor(shape, ints[uint32](t))
	case dtUint64:
		return ortgo.NewTensor(shape, ints[uint64](t))
	case graph.Bool:
		v := make([]bool, n)
		for i, x := range ints[int64](t) {
			v[i] = x != 0
		}
		return ortgo.NewTensor(shape, v)
	case graph.Float16, dtBFloat16:
		if n == 0 {
			return nil, fmt.Errorf("tensor %q: empty %s tensors are not supported", t.Name, dtype)
		}
		raw := make([]byte, 2*n)
		for i, x := range floats[float32](t) {
			h := onnx.Float32ToFloat16(x)
			if dtype == dtBFloat16 {
				h = uint16(math.Float32bits(x) >> 16)
			}
			binary.LittleEndian.PutUint16(raw[2*i:], h)
		}
		return ortgo.NewCustomDataTensor(shape, raw, ortgo.TensorElementDataType(dtype))
	}
	return nil, fmt.Errorf("tensor %q: element type %s is not supported", t.Name, dtype)
}

func newScalar(t *graph.Tensor, dtype graph.DType) (ortgo.Value, error) {
	switch dtype {
	case graph.Float32:
		return ortgo.NewScalar(floats[float32](t)[0])
	case graph.Float64:
		return ortgo.NewScalar(floats[float64](t)[0])
	case graph.Int64:
		return ortgo.NewScalar(ints[int64](t)[0])
	case graph.Int32:
		return ortgo.NewScalar(ints[int32](t)[0])
	case graph.Int8:
		return ortgo.NewScalar(ints[int8](t)[0])
	case graph.Uint8:
		return ortgo.NewScalar(ints[uint8](t)[0])
	case graph.Bool:
		return ortgo.NewScalar(ints[int64](t)[0] != 0)
	}
	return nil, fmt.Errorf("tensor %q: scalar of element type %s is not supported", t.Name, dtype)
}

// newEmptyValue makes a value of the given type and static shape for ONNX
// Runtime to write an output into.
func newEmptyValue(dtype graph.DType, dims []int64) (ortgo.Value, error) {
	t := &graph.Tensor{DType: dtype, Dims: dims}
	n := t.NumElements()
	switch dtype {
	case graph.Float32, graph.Float64, graph.Float16, dtBFloat16:
		t.F32 = make([]float32, n)
	default:
		t.I64 = make([]int64, n)
	}
	return newValue(t, dtype)
}

func floats[T float32 | float64](t *graph.Tensor) []T {
	out := make([]T, 0, len(t.F32)+len(t.I64))
	for _, v := range t.F32 {
		out = append(out, T(v))
	}
	for _, v := range t.I64 {
		out = append(out, T(v))
	}
	return out
}

func ints[T int8 | uint8 | int16 | uint16 | int32 | uint32 | int64 | uint64](t *graph.Tensor) []T {
	out := make([]T, 0, len(t.F32)+len(t.I64))
	for _, v := range t.I64 {
		out = append(out, T(v))
	}
	for _, v := range t.F32 {
		out = append(out, T(v))
	}
	return out
}

// toTensor copies an ONNX Runtime value into a graph.Tensor: float types
// into F32, integer types and bool into I64.
func toTensor(name string, v ortgo.Value) (*graph.Tensor, error) {
	t := &graph.Tensor{Name: name, Dims: []int64(v.GetShape())}
	if t.Dims == nil {
		t.Dims = []int64{}
	}
	switch x := v.(type) {
	case *ortgo.Tensor[float32]:
		t.DType, t.F32 = graph.Float32, append([]float32{}, x.GetData()...)
	case *ortgo.Tensor[float64]:
		t.DType, t.F32 = graph.Float64, convert[float64, float32](x.GetData())
	case *ortgo.Tensor[int64]:
		t.DType, t.I64 = graph.Int64, append([]int64{}, x.GetData()...)
	case *ortgo.Tensor[int32]:
		t.DType, t.I64 = graph.Int32, convert[int32, int64](x.GetData())
	case *ortgo.Tensor[int8]:
		t.DType, t.I64 = graph.Int8, convert[int8, int64](x.GetData())
	case *ortgo.Tensor[uint8]:
		t.DType, t.I64 = graph.Uint8, convert[uint8, int64](x.GetData())
	case *ortgo.Tensor[int16]:
		t.DType, t.I64 = dtInt16, convert[int16, int64](x.GetData())
	case *ortgo.Tensor[uint16]:
		t.DType, t.I64 = dtUint16, convert[uint16, int64](x.GetData())
	case *ortgo.Tensor[uint32]:
		t.DType, t.I64 = dtUint32, convert[uint32, int64](x.GetData())
	case *ortgo.Tensor[uint64]:
		t.DType, t.I64 = dtUint64, convert[uint64, int64](x.GetData())
	case *ortgo.Tensor[bool]:
		t.DType = graph.Bool
		for _, b := range x.GetData() {
			var i int64
			if b {
				i = 1
			}
			t.I64 = append(t.I64, i)
		}
		if t.I64 == nil {
			t.I64 = []int64{}
		}
	case *ortgo.Scalar[float32]:
		t.DType, t.F32 = graph.Float32, []float32{x.GetData()}
	case *ortgo.Scalar[float64]:
		t.DType, t.F32 = graph.Float64, []float32{float32(x.GetData())}
	case *ortgo.Scalar[int64]:
		t.DType, t.I64 = graph.Int64, []int64{x.GetData()}
	case *ortgo.Scalar[int32]:
		t.DType, t.I64 = graph.Int32, []int64{int64(x.GetData())}
	case *ortgo.Scalar[int8]:
		t.DType, t.I64 = graph.Int8, []int64{int64(x.GetData())}
	case *ortgo.Scalar[uint8]:
		t.DType, t.I64 = graph.Uint8, []int64{int64(x.GetData())}
	case *ortgo.Scalar[bool]:
		t.DType, t.I64 = graph.Bool, []int64{0}
		if x.GetData() {
			t.I64[0] = 1
		}
	case *ortgo.CustomDataTensor:
		dt := graph.DType(x.DataType())
		if dt != graph.Float16 && dt != dtBFloat16 {
			return nil, fmt.Errorf("output %q: element type %d is not supported", name, dt)
		}
		raw := x.GetData()
		n := t.NumElements()
		if int64(len(raw)) < 2*n {
			return nil, fmt.Errorf("output %q: %d bytes for %d half floats", name, len(raw), n)
		}
		t.DType, t.F32 = dt, make([]float32, n)
		for i := range t.F32 {
			h := binary.LittleEndian.Uint16(raw[2*i:])
			if dt == dtBFloat16 {
				t.F32[i] = math.Float32frombits(uint32(h) << 16)
			} else {
				t.F32[i] = onnx.Float16ToFloat32(h)
			}
		}
	default:
		return nil, fmt.Errorf("output %q: %s values are not supported", name, v.GetONNXType())
	}
	return t, nil
}

func convert[From, To int8 | uint8 | int16 | uint16 | int32 | uint32 | int64 | uint64 | float32 | float64](in []From) []To {
	out := make([]To, len(in))
	for i, v := range in {
		out[i] = To(v)
	}
	return out
}
