package cpu

import (
	"context"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"sluice/libml"
	"sluice/libml/zoo"
)

// splitAt cuts payload into fragments of the given sizes, cycled (a zero
// size makes an empty fragment), as packet payloads arrive: a fragment may
// end inside a float or a pixel.
func splitAt(payload []byte, sizes []int) [][]byte {
	var frags [][]byte
	for off, k := 0, 0; off < len(payload); k++ {
		n := min(sizes[k%len(sizes)], len(payload)-off)
		frags = append(frags, payload[off:off+n])
		off += n
	}
	return frags
}

// f32Payload is n float32 values (negative, subnormal, NaN payloads, ±0,
// infinities among them) as little-endian bytes.
func f32Payload(n int, seed uint32) []byte {
	specials := []uint32{0x80000000, 0x00000001, 0x7fc00001, 0xff800000, 0x7f800000, 0x3f800000, 0xbf7fffff}
	b := make([]byte, 4*n)
	x := seed
	for i := 0; i < n; i++ {
		x = x*1664525 + 1013904223
		v := x
		if i < len(specials) {
			v = specials[(i+int(seed))%len(specials)]
		}
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// u8Payload is n image bytes covering 0 and 255.
func u8Payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*37) + seed
	}
	b[0], b[n-1] = 0, 255
	return b
}

// sameBits fails unless got and want are equal bit for bit.
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d floats, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: float %d is %#08x, want %#08x", what, i,
				math.Float32bits(got[i]), math.Float32bits(want[i]))
		}
	}
}

// The payload gathered and converted in C (sk_ingest) equals the Go
// reference conversion (libml.Input.Decode) bit for bit: f32 payloads
// and u8 HWC images with a mean and std per channel (3 channels, the fast
// path; 1 and 4, the general one), requests cut into fragments that end
// inside floats and pixels, empty fragments, one request alone, a range
// of requests from the middle of the batch; and rows with a tail of
// float32 values after the payload (a stateful stream's flow state),
// whose first byte may share a fragment with the image's last.
func TestIngestMatchesReference(t *testing.T) {
	splits := [][]int{{1000}, {1, 2, 3, 5, 7}, {6, 0, 10}, {3}, {4099}}
	cases := []struct {
		name      string
		format    libml.InputFormat
		shape     []int64
		mean, std []float32
		tail      int
	}{
		{"f32", libml.InputF32, []int64{3, 7, 11}, nil, nil, 0},
		{"u8 3ch", libml.InputImageU8, []int64{3, 9, 13}, []float32{0.485, 0.456, 0.406}, []float32{0.229, 0.224, 0.225}, 0},
		{"u8 3ch defaults", libml.InputImageU8, []int64{3, 4, 4}, nil, nil, 0},
		{"u8 1ch", libml.InputImageU8, []int64{1, 8, 9}, []float32{0.5}, []float32{0.25}, 0},
		{"u8 4ch", libml.InputImageU8, []int64{4, 5, 7}, []float32{0.1, 0.2, 0.3, 0.4}, []float32{1, 0, 2, 0.5}, 0},
		{"u8 3ch tail", libml.InputImageU8, []int64{3, 9, 13}, []float32{0.485, 0.456, 0.406}, []float32{0.229, 0.224, 0.225}, 17},
		{"u8 1ch tail", libml.InputImageU8, []int64{1, 8, 9}, []float32{0.5}, []float32{0.25}, 3},
		{"f32 tail", libml.InputF32, []int64{3, 7, 11}, nil, nil, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			enc, err := libml.NewEncoding(c.format, c.mean, c.std, c.shape)
			if err != nil {
				t.Fatal(err)
			}
			enc = enc.WithTail(c.tail)
			in := &libml.Input{Enc: enc}
			for r, sizes := range splits {
				var p []byte
				if c.format == libml.InputF32 {
					p = f32Payload(enc.Elems, uint32(r+1))
				} else {
					p = append(u8Payload(enc.Bytes-4*c.tail, byte(r)), f32Payload(c.tail, uint32(r+7))...)
				}
				in.Add(splitAt(p, sizes)...)
			}
			n := in.N()
			want := make([]float32, n*enc.Elems)
			if err := in.Decode(want, 0, n); err != nil {
				t.Fatal(err)
			}
			var x Ingester
			got := make([]float32, n*enc.Elems)
			if err := x.Ingest(got, in, 0, n); err != nil {
				t.Fatal(err)
			}
			sameBits(t, "whole batch", got, want)
			for r0 := 0; r0 < n; r0++ {
				for r1 := r0 + 1; r1 <= n; r1++ {
					part := make([]float32, (r1-r0)*enc.Elems)
					if err := x.Ingest(part, in, r0, r1); err != nil {
						t.Fatal(err)
					}
					sameBits(t, "requests from the middle", part, want[r0*enc.Elems:r1*enc.Elems])
				}
			}
		})
	}
}

// A request whose fragments do not add up to its payload size fails the
// batch and nothing is written.
func TestIngestRefusesWrongSize(t *testing.T) {
	enc, err := libml.NewEncoding(libml.InputImageU8, nil, nil, []int64{3, 2, 2})
	if err != nil {
		t.Fatal(err)
	}
	in := &libml.Input{Enc: enc}
	in.Add(u8Payload(12, 1)[:5], u8Payload(12, 1)[5:])
	in.Add(u8Payload(11, 2))
	dst := make([]float32, 2*enc.Elems)
	for i := range dst {
		dst[i] = 42
	}
	var x Ingester
	err = x.Ingest(dst, in, 0, 2)
	if err == nil || !strings.Contains(err.Error(), "request 1") {
		t.Fatalf("short request: err %v, want one naming request 1", err)
	}
	for i, v := range dst {
		if v != 42 {
			t.Fatalf("float %d written (%v) by a refused batch", i, v)
		}
	}
	if err := x.Ingest(dst[:3], in, 0, 1); err == nil {
		t.Fatal("a destination too small was accepted")
	}
}

// The cpu backend's InferInput (payload gathered in C into the arena)
// gives the outputs of InferBatch on the reference conversion, bit for
// bit, at batch 1 and 3, calls Gathered once and reports one copy per
// request; it allocates nothing once warm.
func TestInferInputMatchesInferBatch(t *testing.T) {
	b := newTestBackend(t, 2)
	ctx := context.Background()
	inst := loadZoo(t, b, "squeezenet11", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 9}, 4)
	defer inst.Close()
	enc, err := libml.NewEncoding(libml.InputImageU8, []float32{0.485, 0.456, 0.406}, []float32{0.229, 0.224, 0.225}, inst.InputShape())
	if err != nil {
		t.Fatal(err)
	}
	in := &libml.Input{Enc: enc}
	gathered := 0
	in.Gathered = func() { gathered++ }
	payloads := [][]byte{u8Payload(enc.Bytes, 3), u8Payload(enc.Bytes, 77), u8Payload(enc.Bytes, 150)}
	osz := inst.OutputSize()
	for _, n := range []int{1, 3} {
		in.Reset()
		for r := 0; r < n; r++ {
			in.Add(splitAt(payloads[r], []int{1000, 7, 1})...)
		}
		ref := make([]float32, n*enc.Elems)
		if err := in.Decode(ref, 0, n); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, n*osz)
		if err := b.InferBatch(ctx, inst, n, ref, want); err != nil {
			t.Fatal(err)
		}
		gathered = 0
		got := make([]float32, n*osz)
		if err := b.InferInput(ctx, inst, in, got); err != nil {
			t.Fatal(err)
		}
		sameBits(t, "InferInput vs InferBatch", got, want)
		if gathered != 1 || in.Copies != 1 {
			t.Fatalf("batch %d: Gathered called %d times, %d copies per request; want 1 and 1", n, gathered, in.Copies)
		}
		allocs := testing.AllocsPerRun(5, func() {
			if err := b.InferInput(ctx, inst, in, got); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("batch %d: InferInput allocates %.1f times per batch", n, allocs)
		}
	}
	in.Reset()
	in.Add(payloads[0][:10])
	if err := b.InferInput(ctx, inst, in, make([]float32, osz)); err == nil {
		t.Fatal("a short payload was accepted")
	}
}
