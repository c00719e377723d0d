package cudrv

import (
	"errors"
	"slices"
	"testing"
)

// A missing library is ErrNoDriver, not a crash (with or without cgo).
func TestOpenLibMissing(t *testing.T) {
	_, err := OpenLib("libcuda-sluice-test-missing.so.1")
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("missing library: %v, want ErrNoDriver", err)
	}
}

// EntryNames finds the visible entries, in order, and nothing else.
func TestEntryNames(t *testing.T) {
	ptx := []byte(`.version 7.0
.target sm_80
.address_size 64

.func helper(.param .b64 x)
{
	ret;
}

.visible .entry sg_a(
	.param .u64 sg_a_param_0
)
{
	ret;
}
// .visible .entry sg_commented(
.visible .entry sg_b_2(
	.param .u64 sg_b_2_param_0
)
{
	ret;
}
`)
	if got, want := EntryNames(ptx), []string{"sg_a", "sg_b_2"}; !slices.Equal(got, want) {
		t.Errorf("EntryNames = %q, want %q", got, want)
	}
	if got := EntryNames([]byte(".version 7.0\n")); len(got) != 0 {
		t.Errorf("entries in a module without any: %q", got)
	}
}

// Error names the call and the driver's name and description of the
// result, or the bare code when the driver gave no name.
func TestErrorString(t *testing.T) {
	for _, c := range []struct {
		e    Error
		want string
	}{
		{Error{Op: "cuMemAlloc", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Msg: "out of memory"},
			"cuda: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"},
		{Error{Op: "cuInit", Code: 100, Name: "CUDA_ERROR_NO_DEVICE"}, "cuda: cuInit: CUDA_ERROR_NO_DEVICE"},
		{Error{Op: "cuInit", Code: 999}, "cuda: cuInit: CUresult 999"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
	}
}
