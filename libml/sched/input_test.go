package sched

import (
	"context"
	"math"
	"testing"
	"unsafe"

	"sluice/libml"
)

// InferInput gathers the requests' payload (u8 images cut into fragments
// that end inside pixels) in C into the job input and runs it: the
// outputs are those of InferBatch on the reference conversion, bit for
// bit, at a batch that fills its bucket (2) and one that does not (3 in
// the bucket of 4); Loaded (the input in place) then Gathered (the
// packets may go, when the job is done) are called once each, and one
// copy is reported (the payload gathered straight into the job's model
// instance).
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
	gathered, loaded := 0, 0
	in.Gathered = func() { gathered++ }
	in.Loaded = func() {
		if gathered != 0 {
			t.Error("Loaded after Gathered")
		}
		loaded++
	}
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
		gathered, loaded = 0, 0
		got := make([]float32, n*osz)
		if err := b.InferInput(ctx, inst, in, got); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("batch %d: output %d is %v, InferBatch gives %v", n, i, got[i], want[i])
			}
		}
		if gathered != 1 || loaded != 1 || in.Copies != 1 {
			t.Fatalf("batch %d: Gathered called %d times, Loaded %d, %d copies reported; want 1, 1 and 1", n, gathered, loaded, in.Copies)
		}
	}
}

// A cpu job that carries its requests' payload (Job.Input) is gathered
// straight into the instance it is bound to (its first rows), and
// gathered again the same way when a preemption sends it back to its
// first kernel (setInput, which restorePoint calls then); run through
// the scheduler, under reef preempted by an RT arrival (scripted), its
// output is the one it has alone from the same input, bit for bit.
func TestPayloadJob(t *testing.T) {
	s := newSched(t, Config{Policy: PolicyREEF, BEQueues: 1, NoPadding: true})
	releaseHolds(t, s)
	const key, seed = "squeeze", 12
	m := load(t, s, key, ModelOptions{})
	rt := load(t, s, "resnet", ModelOptions{})
	enc, err := libml.NewEncoding(libml.InputF32, nil, nil, []int64{int64(m.InputSize())})
	if err != nil {
		t.Fatal(err)
	}
	x := fillInput(m.InputSize(), seed)
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
	payload := func() *libml.Input {
		in := &libml.Input{Enc: enc}
		for off := 0; off < len(raw); off += 998 {
			in.Payload = append(in.Payload, raw[off:min(off+998, len(raw))])
		}
		in.EndRequest()
		return in
	}
	// the gather, twice, into an instance whose input was clobbered
	inst, err := m.acquire()
	if err != nil {
		t.Fatal(err)
	}
	j := &Job{Model: m, Input: payload()}
	for round := 0; round < 2; round++ {
		for i := range inst.input() {
			inst.input()[i] = float32(math.NaN())
		}
		if err := inst.setInput(j); err != nil {
			t.Fatal(err)
		}
		if d := sameBits(inst.input(), x); d != "" {
			t.Fatalf("gather %d into the instance: %s", round, d)
		}
	}
	m.releaseInstance(inst)
	// through the scheduler, preempted in the middle of the model
	want := reference(t, key, seed)[seed]
	live := liveKernels(m)
	b := &Job{Model: m, Class: BE, Queue: 0, Input: payload(), Out: make([]float32, m.OutputSize())}
	rtIntoBE(t, s, b, job(rt, RT, 0, 13), live[len(live)/2], 0, 0, nil)
	if b.Preemptions != 1 {
		t.Fatalf("BE job preempted %d times, want 1", b.Preemptions)
	}
	if d := sameBits(b.Out, want); d != "" {
		t.Fatalf("BE job with a payload input, preempted and restored: %s", d)
	}
	// a payload that does not fit the model is refused at Submit
	bad, err := libml.NewEncoding(libml.InputF32, nil, nil, []int64{int64(m.InputSize() + 1)})
	if err != nil {
		t.Fatal(err)
	}
	wrong := &libml.Input{Enc: bad}
	wrong.Add(make([]byte, bad.Bytes))
	if err := s.Submit(&Job{Model: m, Class: BE, Input: wrong}); err == nil {
		t.Fatal("a payload of another size was accepted")
	}
}
