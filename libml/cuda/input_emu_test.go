//go:build linux && cgo

package cuda

import (
	"context"
	"math"
	"testing"
	"unsafe"

	"sluice/libml"
	"sluice/libml/zoo"
)

// InferInput on the emulator: f32 payloads and u8 images whose fragments
// lie in a registered packet region are gathered on the device, the
// image converted there (no host copy); payloads elsewhere (Go memory,
// as a kernel-socket port's) on the host (two host copies); every way
// gives InferBatch's outputs on the reference conversion, bit for bit,
// and Gathered is called once per batch.
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

	// u8 images of two requests, fragments ending inside pixels: converted
	// by the gather kernel, bit for bit as the host converts them
	u8, err := libml.NewEncoding(libml.InputImageU8, []float32{0.5, 0.4, 0.3}, []float32{0.2, 0.3, 0.4}, inst.InputShape())
	if err != nil {
		t.Fatal(err)
	}
	inU8 := &libml.Input{Enc: u8}
	inU8Go := &libml.Input{Enc: u8}
	pos = 1
	for r := 0; r < 2; r++ {
		img := make([]byte, u8.Bytes)
		for i := range img {
			img[i] = byte(i*13 + r*7)
		}
		for off := 0; off < len(img); off += 1433 {
			n := copy(mem[pos:], img[off:min(off+1433, len(img))])
			inU8.Payload = append(inU8.Payload, mem[pos:pos+n])
			pos += n + 5
		}
		inU8.EndRequest()
		inU8Go.Add(img[:500], img[500:])
	}
	ref := make([]float32, 2*isz)
	if err := inU8.Decode(ref, 0, 2); err != nil {
		t.Fatal(err)
	}
	wantU8 := infer(t, b, inst, 2, ref)
	run("u8 images in the registered region", inU8, 0, wantU8)
	run("u8 images outside every region", inU8Go, 2, wantU8)

	// the gather kernel's conversion alone, against the reference
	// conversion: the input tensor it wrote, read back bit for bit
	inst.mu.Lock()
	if !inst.regionFrags(inU8) {
		t.Fatal("u8 fragments not found in the region")
	}
	if err := inst.gather(2, inst.inFrags, u8); err != nil {
		t.Fatal(err)
	}
	if err := inst.ln.s.Sync(); err != nil {
		t.Fatal(err)
	}
	p, _ := inst.planFor(2)
	got := make([]float32, 2*isz)
	if err := b.dev.Read(f32view(got), inst.arena+4*uint64(p.pr.p.Inputs[0].Off)); err != nil {
		t.Fatal(err)
	}
	inst.gathered = 0
	inst.mu.Unlock()
	for k := range got {
		if math.Float32bits(got[k]) != math.Float32bits(ref[k]) {
			t.Fatalf("device-converted tensor: element %d is %v (%#x), the host converts to %v (%#x)",
				k, got[k], math.Float32bits(got[k]), ref[k], math.Float32bits(ref[k]))
		}
	}

	// more channels than the kernel converts: refused by the plan
	var a Args
	a.Out, a.Aux = 1, 1
	five := &libml.Encoding{Format: libml.InputImageU8, Channels: 5, Pixels: 4, Elems: 20, Bytes: 20,
		Scale: make([]float32, 5), Bias: make([]float32, 5)}
	if _, err := PlanBatchGatherConv(&a, 1, 1, five); err == nil {
		t.Fatal("a 5-channel conversion was planned")
	}
	if deviceConverts(five) {
		t.Fatal("a 5-channel image would be converted on the device")
	}
	// a stateful stream's rows: the flow state is host memory, so the
	// whole row is gathered on the host
	if deviceConverts(u8.WithTail(3)) || deviceConverts(f32.WithTail(3)) {
		t.Fatal("rows with a flow state would be gathered on the device")
	}
}
