package libml

// PerRequestShape is a model input or output shape without its batch
// dimension: a leading dimension of 1 or a dynamic one (≤ 0) is dropped.
// The result is a copy.
func PerRequestShape(d []int64) []int64 {
	if len(d) > 0 && d[0] <= 1 {
		return append([]int64{}, d[1:]...)
	}
	return append([]int64{}, d...)
}

// Elems is the element count of a shape (1 for a scalar).
func Elems(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}
