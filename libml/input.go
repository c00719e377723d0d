package libml

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// InputFormat says how a request's payload bytes become the model's input
// tensor.
type InputFormat string

// Input formats.
const (
	// InputF32 is the input tensor itself: InputSize float32 values,
	// little-endian.
	InputF32 InputFormat = "f32"
	// InputImageU8 is an 8-bit image in HWC order (H×W×C bytes, C = the
	// model's channel count): scaled to [0,1], normalized with a mean and
	// a standard deviation per channel, and transposed to the model's CHW
	// layout.
	InputImageU8 InputFormat = "u8-hwc"
)

// Encoding is an input format resolved against one model's input shape:
// everything a backend needs to turn a request's payload into its rows of
// the input tensor. Make it with NewEncoding; it is read-only afterwards
// and may be shared.
type Encoding struct {
	// Format is the payload format.
	Format InputFormat
	// Elems is the float32 count of one request's input (the model's
	// InputSize); Bytes the payload size a request must have.
	Elems, Bytes int
	// Channels and Pixels are C and H×W of an InputImageU8 model input
	// (0 for InputF32).
	Channels, Pixels int
	// Scale and Bias hold, per channel, the affine map of an InputImageU8
	// byte x to its input value: float32(float32(x)*Scale[c]) + Bias[c],
	// that is (x/255 - mean[c]) / std[c] folded into two constants.
	Scale, Bias []float32
	// Tail is how many float32 values follow the payload's in each
	// request's input row, carried as the request's last fragments
	// (little-endian) after its payload: a stateful stream's flow state
	// (WithTail). Elems and Bytes count them.
	Tail int
}

// WithTail returns a copy of e whose rows end with n more float32
// values, carried after each request's payload as fragments of its own
// (see Encoding.Tail).
func (e *Encoding) WithTail(n int) *Encoding {
	c := *e
	c.Tail += n
	c.Elems += n
	c.Bytes += 4 * n
	return &c
}

// ErrMeanStd is NewEncoding's error for a mean or std list whose length is
// not the model's channel count.
var ErrMeanStd = errors.New("mean and std do not match the channels")

// NewEncoding resolves format (empty: InputF32) for a model whose
// per-request input shape is shape. InputImageU8 needs a CHW shape and
// takes mean and std per channel (empty: 0 and 1; a zero std means 1).
func NewEncoding(format InputFormat, mean, std []float32, shape []int64) (*Encoding, error) {
	n := Elems(shape)
	if n < 1 || n > math.MaxInt32 {
		return nil, fmt.Errorf("libml: input shape %v: %d elements", shape, n)
	}
	e := &Encoding{Format: format, Elems: int(n)}
	switch format {
	case InputF32, "":
		e.Format = InputF32
		e.Bytes = 4 * e.Elems
		return e, nil
	case InputImageU8:
	default:
		return nil, fmt.Errorf("libml: unknown input format %q (want %q or %q)", format, InputF32, InputImageU8)
	}
	if len(shape) != 3 {
		return nil, fmt.Errorf("libml: input %q needs a CHW model input, model has shape %v", format, shape)
	}
	e.Channels, e.Pixels, e.Bytes = int(shape[0]), int(shape[1]*shape[2]), e.Elems
	if len(mean) != 0 && len(mean) != e.Channels || len(std) != 0 && len(std) != e.Channels {
		return nil, fmt.Errorf("libml: input %q: %w: %d values each for %d channels, have %d and %d", format, ErrMeanStd, e.Channels, e.Channels, len(mean), len(std))
	}
	e.Scale, e.Bias = make([]float32, e.Channels), make([]float32, e.Channels)
	for c := range e.Scale {
		m, s := float32(0), float32(1)
		if len(mean) > 0 {
			m = mean[c]
		}
		if len(std) > 0 && std[c] != 0 {
			s = std[c]
		}
		e.Scale[c], e.Bias[c] = 1/(255*s), -m/s
	}
	return e, nil
}

// Input is one batch's input as the dataplane holds it: each request's
// payload, still in the packet buffers it arrived in (views, not copies),
// and how to turn it into the model's input. The backend gathers and
// converts it (Backend.InferInput) straight into the instance's input
// tensor. An Input is reused batch after batch: Reset, then Add each
// request.
type Input struct {
	// Enc says how a payload becomes a request's input rows.
	Enc *Encoding
	// Payload holds the fragments of every request, request after
	// request, each request's in payload order; request r's are
	// Payload[Ends[r-1]:Ends[r]] (Ends[-1] = 0). A fragment may end
	// anywhere, inside a float or a pixel.
	Payload [][]byte
	Ends    []int
	// Gathered, when set, is called once the backend no longer reads
	// Payload (the packet buffers may then be given back), before the
	// batch's results are ready when the backend can tell.
	Gathered func()
	// Loaded, when set, is called when the payload is in the model's
	// input and the batch's compute begins, by a backend that keeps
	// reading Payload after that (a scheduler job gathers it again if a
	// preemption restarts it from its first kernel), so Gathered comes
	// only when the batch is done; it may be called again after such a
	// restart. Where a backend does not call it, Gathered marks the
	// same moment.
	Loaded func()
	// Copies is set by InferInput: how many times the backend copied each
	// request's payload (or its conversion) through host memory on its way
	// to the model's input tensor. 1 is packet → tensor; 0 means the
	// device read the packet buffers in place.
	Copies int
}

// Reset empties in for a new batch, keeping its memory.
func (in *Input) Reset() {
	clear(in.Payload) // drop references to packet buffers
	in.Payload, in.Ends, in.Copies = in.Payload[:0], in.Ends[:0], 0
}

// Add appends one request made of the given fragments.
func (in *Input) Add(frags ...[]byte) {
	in.Payload = append(in.Payload, frags...)
	in.Ends = append(in.Ends, len(in.Payload))
}

// EndRequest closes the request whose fragments were appended to Payload
// since the last EndRequest or Add (for callers that append fragments
// themselves, without a slice of their own).
func (in *Input) EndRequest() { in.Ends = append(in.Ends, len(in.Payload)) }

// N is the number of requests.
func (in *Input) N() int { return len(in.Ends) }

// Request returns request r's fragments.
func (in *Input) Request(r int) [][]byte {
	start := 0
	if r > 0 {
		start = in.Ends[r-1]
	}
	return in.Payload[start:in.Ends[r]]
}

// Load calls in.Loaded, if set, when the payload is in the model's
// input.
func (in *Input) Load() {
	if in.Loaded != nil {
		in.Loaded()
	}
}

// Gather calls in.Gathered, if set, once the backend is done reading the
// payload.
func (in *Input) Gather() {
	if in.Gathered != nil {
		in.Gathered()
	}
}

// Check verifies that the input fits a batch of batch requests of elems
// floats each: an encoding for that size and one request per row. The
// payload sizes are checked where the payload is read (a request whose
// fragments do not add up to Enc.Bytes fails the batch, nothing written).
func (in *Input) Check(batch, elems int) error {
	switch {
	case in.Enc == nil:
		return errors.New("input without an encoding")
	case in.Enc.Elems != elems:
		return fmt.Errorf("input encoding of %d floats per request, model takes %d", in.Enc.Elems, elems)
	case in.N() != batch:
		return fmt.Errorf("input holds %d requests, batch is %d", in.N(), batch)
	}
	return nil
}

// Decode is the reference conversion, in Go, element by element: it
// writes requests r0..r1-1 into dst (Enc.Elems floats each, back to
// back). Backends convert in C (native/cpu's ingest); tests compare their
// bits against this.
func (in *Input) Decode(dst []float32, r0, r1 int) error {
	e := in.Enc
	if e == nil {
		return errors.New("libml: decode: input without an encoding")
	}
	if len(dst) < (r1-r0)*e.Elems {
		return fmt.Errorf("libml: decode: %d floats for %d requests of %d", len(dst), r1-r0, e.Elems)
	}
	buf := make([]byte, 0, e.Bytes)
	for r := r0; r < r1; r++ {
		buf = buf[:0]
		for _, f := range in.Request(r) {
			buf = append(buf, f...)
		}
		if len(buf) != e.Bytes {
			return fmt.Errorf("libml: decode: request %d has %d payload bytes, want %d", r, len(buf), e.Bytes)
		}
		d := dst[(r-r0)*e.Elems : (r-r0+1)*e.Elems]
		switch e.Format {
		case InputF32:
			for i := range d {
				d[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
			}
		case InputImageU8:
			c, hw := e.Channels, e.Pixels
			for ch := 0; ch < c; ch++ {
				sc, bi := e.Scale[ch], e.Bias[ch]
				for p := 0; p < hw; p++ {
					// the explicit conversion rounds the product: no
					// fused multiply-add, the same bits as the C code
					d[ch*hw+p] = float32(float32(buf[p*c+ch])*sc) + bi
				}
			}
			for i := range e.Tail {
				d[c*hw+i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[c*hw+4*i:]))
			}
		}
	}
	return nil
}
