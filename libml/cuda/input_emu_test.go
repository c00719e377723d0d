//go:build linux && cgo

package cuda

import (
	"context"
	"testing"
	"unsafe"

	"sluice/libml"
	"sluice/libml/zoo"
)

// InferInput on the emulator: f32 payloads whose fragments lie in a
// registered packet region are gathered on the device (no host copy),
// payloads elsewhere (Go memory, as a kernel-socket port's) and u8 images
// on the host (two host copies); every way gives InferBatch's outputs on
// the reference conversion, and Gathered is called once per batch.
func TestInferInputEmu(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	inst := load(t, b, "sq", preemptModel(t, "squeezenet11"), 2).(*Instance)
	defer inst.Close()
	ctx := context.Background()
	isz := inst.InputSize()
	vals := zoo.Input(5, 2*isz)
	want := infer(t, b, inst, 2, vals)
	payload := f32view(vals)

	mem := packetRegion(t, 1<<20)
	if _, err := b.RegisterRegion(unsafe.Pointer(&mem[0]), len(mem)); err != nil {
		t.Fatal(err)
	}
	f32, err := libml.NewEncoding(libml.InputF32, nil, nil, inst.InputShape())
	if err != nil {
		t.Fatal(err)
	}
	gathered := 0
	run := func(what string, in *libml.Input, copies int, want []float32) {
		t.Helper()
		gathered = 0
		in.Gathered = func() { gathered++ }
		out := make([]float32, in.N()*inst.OutputSize())
		if err := b.InferInput(ctx, inst, in, out); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		closeTo(t, what, out, want, 0)
		if gathered != 1 || in.Copies != copies {
			t.Fatalf("%s: Gathered called %d times, %d copies; want 1 and %d", what, gathered, in.Copies, copies)
		}
	}

	// in the region: 1001-byte fragments (inside floats), at odd places
	inReg := &libml.Input{Enc: f32}
	pos := 3
	for r := 0; r < 2; r++ {
		row := payload[r*4*isz : (r+1)*4*isz]
		for off := 0; off < len(row); off += 1001 {
			n := copy(mem[pos:], row[off:min(off+1001, len(row))])
			inReg.Payload = append(inReg.Payload, mem[pos:pos+n])
			pos += n + 17
		}
		inReg.EndRequest()
	}
	run("f32 in the registered region", inReg, 0, want)

	// the same payload in Go memory
	inGo := &libml.Input{Enc: f32}
	for r := 0; r < 2; r++ {
		row := append([]byte(nil), payload[r*4*isz:(r+1)*4*isz]...)
		inGo.Add(row[:999], row[999:])
	}
	run("f32 outside every region", inGo, 2, want)

	// a u8 image: converted on the host
	u8, err := libml.NewEncoding(libml.InputImageU8, []float32{0.5, 0.4, 0.3}, []float32{0.2, 0.3, 0.4}, inst.InputShape())
	if err != nil {
		t.Fatal(err)
	}
	img := make([]byte, u8.Bytes)
	for i := range img {
		img[i] = byte(i * 13)
	}
	inU8 := &libml.Input{Enc: u8}
	copy(mem, img)
	inU8.Add(mem[:500], mem[500:u8.Bytes])
	ref := make([]float32, isz)
	if err := inU8.Decode(ref, 0, 1); err != nil {
		t.Fatal(err)
	}
	run("u8 image", inU8, 2, infer(t, b, inst, 1, ref))
}
