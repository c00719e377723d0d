package sched

import (
	"context"
	"math"
	"testing"

	"sluice/libml"
)

// InferInput gathers the requests' payload (u8 images cut into fragments
// that end inside pixels) in C into the job input and runs it: the
// outputs are those of InferBatch on the reference conversion, bit for
// bit, at a batch that fills its bucket (2) and one that does not (3 in
// the bucket of 4); Gathered is called once and two copies are reported.
func TestInferInputMatchesInferBatch(t *testing.T) {
	b := newTestBackend(t, PolicyREEF)
	ctx := context.Background()
	inst, err := b.LoadModel(ctx, "sq", testGraph(t, "squeeze"))
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	if err := b.ConfigureBatch(inst, 4); err != nil {
		t.Fatal(err)
	}
	enc, err := libml.NewEncoding(libml.InputImageU8, []float32{0.4, 0.5, 0.6}, []float32{0.2, 0.25, 0.3}, inst.InputShape())
	if err != nil {
		t.Fatal(err)
	}
	osz := inst.OutputSize()
	in := &libml.Input{Enc: enc}
	gathered := 0
	in.Gathered = func() { gathered++ }
	for _, n := range []int{2, 3} {
		in.Reset()
		for r := 0; r < n; r++ {
			p := make([]byte, enc.Bytes)
			for i := range p {
				p[i] = byte(i*7 + 31*r)
			}
			for off := 0; off < len(p); off += 1000 {
				in.Payload = append(in.Payload, p[off:min(off+1000, len(p))])
			}
			in.EndRequest()
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
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("batch %d: output %d is %v, InferBatch gives %v", n, i, got[i], want[i])
			}
		}
		if gathered != 1 || in.Copies != 2 {
			t.Fatalf("batch %d: Gathered called %d times, %d copies reported; want 1 and 2", n, gathered, in.Copies)
		}
	}
}
