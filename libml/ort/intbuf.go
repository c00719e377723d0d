package ort

import (
	ortgo "github.com/yalue/onnxruntime_go"

	"sluice/libml/graph"
)

// intBuf is an instance's scratch for a model input or output of an
// integer type: the float32 request data is converted into it, or out of
// it, with no allocation per batch.
type intBuf interface {
	// tensor converts src into the first len(src) values (none when src
	// is nil) and wraps the first shape.FlattenedSize() as an ORT tensor.
	tensor(shape ortgo.Shape, src []float32) (ortgo.Value, error)
	// read converts the first len(dst) values into dst.
	read(dst []float32)
}

type intsOf[T int8 | uint8 | int32 | int64] []T

func (b intsOf[T]) tensor(shape ortgo.Shape, src []float32) (ortgo.Value, error) {
	for k, v := range src {
		b[k] = T(v)
	}
	t, err := ortgo.NewTensor(shape, []T(b[:shape.FlattenedSize()]))
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (b intsOf[T]) read(dst []float32) {
	for k := range dst {
		dst[k] = float32(b[k])
	}
}

// newIntBuf makes scratch of n values for element type dt (nil for
// float32, which needs none).
func newIntBuf(dt graph.DType, n int) intBuf {
	switch dt {
	case graph.Int64:
		return make(intsOf[int64], n)
	case graph.Int32:
		return make(intsOf[int32], n)
	case graph.Uint8:
		return make(intsOf[uint8], n)
	case graph.Int8:
		return make(intsOf[int8], n)
	}
	return nil
}
