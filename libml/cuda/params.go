package cuda

import (
	"encoding/binary"
)

// Param is one kernel parameter as the PTX declares it: its size and
// alignment in bytes.
type Param struct {
	Size, Align int
}

// The parameter lists: every kernel takes (sg_state *st, long long idx,
// sg_args a); sg_pad adds (sg_pad_ctl *pad).
var (
	stdParams = []Param{{8, 8}, {8, 8}, {ArgsSize, 8}}
	padParams = []Param{{8, 8}, {8, 8}, {ArgsSize, 8}, {8, 8}}
)

// Signature is the parameter list of kernel name.
func Signature(name string) []Param {
	if name == KernelPad {
		return padParams
	}
	return stdParams
}

// Layout places parameters in a launch's parameter buffer the way the
// driver does for CU_LAUNCH_PARAM_BUFFER_POINTER: each at the next offset
// aligned to its alignment. It returns the offsets and the buffer size.
func Layout(ps []Param) (offs []int, size int) {
	offs = make([]int, len(ps))
	for i, p := range ps {
		size = (size + p.Align - 1) / p.Align * p.Align
		offs[i] = size
		size += p.Size
	}
	return offs, size
}

// Pack builds the parameter buffer of an operator (or special) kernel:
// the stream state's device address, the execution index and the
// arguments.
func Pack(state uint64, exec int64, a *Args) []byte {
	offs, size := Layout(stdParams)
	b := make([]byte, size)
	binary.LittleEndian.PutUint64(b[offs[0]:], state)
	binary.LittleEndian.PutUint64(b[offs[1]:], uint64(exec))
	a.Encode(b[offs[2]:])
	return b
}

// PackPad builds sg_pad's parameter buffer: the RT kernel's state,
// execution index and arguments, and the control block's device address.
func PackPad(state uint64, exec int64, rt *Args, ctl uint64) []byte {
	offs, size := Layout(padParams)
	b := make([]byte, size)
	binary.LittleEndian.PutUint64(b[offs[0]:], state)
	binary.LittleEndian.PutUint64(b[offs[1]:], uint64(exec))
	rt.Encode(b[offs[2]:])
	binary.LittleEndian.PutUint64(b[offs[3]:], ctl)
	return b
}
