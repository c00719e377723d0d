package libml

import (
	"sluice/libml/engine"
	"sluice/libml/kprof"
)

// The segment contract: how the scheduler (libml/sched) drives a device
// whose instances run their kernels on streams of their own (the cuda
// device, on a GPU or on the kernel emulator). The scheduler decides what
// runs when: it runs a job's kernels in segments, preempts a segment
// (host-queue reset and preemption flag, REEF §4) and restores the job
// from the execution index the device reports. Layering: the device
// implements these interfaces, the scheduler uses them, and neither names
// the other's types.

// SegmentBackend is a backend whose instances a scheduler can drive
// segment by segment (SegmentInstance). Its instances come from the six
// calls as usual: LoadModel, LinkModel (one instance per job in flight,
// over one copy of the weights) and ConfigureBatch.
type SegmentBackend interface {
	Backend
	// Units is the device's unit count (SMs): what the scheduler's
	// profiles and SPLIT's block sizes are relative to.
	Units() int
}

// SegmentInstance is an instance a scheduler runs in segments: kernels
// [From, To) of the program of one batch size, on the instance's own
// stream. One segment runs at a time per instance.
type SegmentInstance interface {
	Instance
	// Batched reports whether the model has a batch dimension (batch
	// sizes other than 1 exist).
	Batched() bool
	// Program is the compiled program the instance runs at batch size
	// batch (ConfigureBatch first): its kernels and idempotent groups.
	Program(batch int) (*engine.Program, error)
	// ProfileSegments times every kernel of the batch's program in every
	// version (reps runs each) on the instance's stream, and returns the
	// device's kernel profile (grids, times, occupancy; the fields only
	// the program knows, such as Bytes, are the caller's to fill). The
	// device keeps it for the model at that batch size, for padding.
	ProfileSegments(batch, reps int) (*kprof.Model, error)
	// SetKernelProfile installs a profile that ProfileSegments measured
	// earlier on the same device (a scheduler given it as data) for the
	// model at batch size mp.Batch, for padding, as ProfileSegments
	// does. A profile that does not fit the program or the device is an
	// error.
	SetKernelProfile(mp *kprof.Model) error
	// Arm marks a segment as about to run: a Preempt from now on
	// preempts the next RunSegment even when it comes before that
	// segment's first launch.
	Arm()
	// RunSegment runs one segment and returns when it has completed or,
	// preempted, drained.
	RunSegment(batch int, seg Segment) (SegmentResult, error)
	// Preempt preempts the armed or running segment: the host queue stops
	// and the stream's flag is set, so launched kernels exit within a
	// block or an in-loop check. Without one it does nothing.
	Preempt() error
}

// PreemptBatcher is a segment instance whose device preempts several
// segments in one round trip: every flag is written, then the device is
// waited for once (REEF enters RT mode by preempting every running BE
// stream; on a GPU each Preempt alone waits for the control stream, and
// the RT job's launch waits for them all).
type PreemptBatcher interface {
	SegmentInstance
	// PreemptWith preempts the instance's armed or running segment and
	// those of others, as Preempt does each, waiting for the device once
	// for all of them that share its device (the others one by one).
	PreemptWith(others []SegmentInstance) error
}

// Segment is one run of a job's kernels on an instance.
type Segment struct {
	// From is where it starts: kernel From.Kernel from its block
	// From.Block in version From.Version (Block 0, Version 0: the whole
	// kernel).
	From ResumePoint
	// To is the kernel after the last one it runs (at most the program's
	// kernel count).
	To int
	// In, when not nil, is the batch's input, written into the
	// instance's input tensor before the first kernel (a job's first
	// segment, or a restart from kernel 0).
	In []float32
	// Input, when In is nil, is the batch's input as the requests'
	// payload (InferInput's): the device gathers it into the input
	// tensor, reading the fragments in place where they lie in a region
	// mapped into it (RegionMapper), else gathering and converting them
	// on the host; it sets Input.Copies to the host copies made. The
	// payload must stay valid until the job has finished: a restart from
	// kernel 0 gathers it again. Input.N() requests fill the first rows
	// of the batch.
	Input *Input
	// Out, when not nil, receives the batch's output if the segment ran
	// to the program's end without being preempted.
	Out []float32
}

// ResumePoint is where a job's next segment starts: kernel Kernel from
// its block Block, of version Version (a kernel that was started in a
// version finishes in it, since versions tile the output differently).
type ResumePoint struct {
	Kernel, Block, Version int
}

// SegmentResult is how a segment ended.
type SegmentResult struct {
	// Preempted: the flag stopped it, or kernels were left unlaunched.
	Preempted bool
	// Exec is the execution index of the last kernel that started (-1:
	// none did).
	Exec int
}

// PaddingSegmentInstance is a segment instance whose segments can carry
// the blocks of suspended jobs (dynamic kernel padding, REEF §5): its
// kernels launch together with blocks of the jobs' next kernels on the
// units they leave idle, each job's kernel chosen by its profiled block
// time (rule 1) and occupancy (rule 2).
type PaddingSegmentInstance interface {
	SegmentInstance
	// RunSegmentPadded is RunSegment with padding: before each kernel,
	// jobs (called on the segment's goroutine) returns the suspended jobs
	// to consider, in order of preference. Each job's At moves past the
	// blocks padding ran; a job whose instance is busy, or on another
	// device, is skipped. The jobs' instances must not run segments of
	// their own until RunSegmentPadded returns.
	RunSegmentPadded(batch int, seg Segment, jobs func() []*PadJob) (SegmentResult, error)
}

// PadJob is a suspended job padding may advance.
type PadJob struct {
	// Inst runs the job; Batch is its batch size.
	Inst  SegmentInstance
	Batch int
	// At is where its next segment starts; padding advances it.
	At ResumePoint
	// Blocks counts its blocks run by padding, Kernels its kernels that
	// padding finished (padding adds to both).
	Blocks, Kernels int64
}
