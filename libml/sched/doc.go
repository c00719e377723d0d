// Package sched is sluice's GPU-style scheduler (ARCHITECTURE.md §3) on the
// CPU engine: real-time (RT) inference preempts best-effort (BE) inference
// within microseconds, and BE work uses what RT work leaves idle. It
// implements REEF's mechanisms (reset-based preemption, restore from
// idempotent groups, dynamic kernel padding with multi-version kernels)
// and five policies: reef, seq, conc, srpt (Paella) and split (SPLIT).
//
// # Using it
//
//	s, err := sched.New(sched.Config{Policy: sched.PolicyREEF, Units: 2})
//	m, err := s.Load("resnet50", g, sched.ModelOptions{Batch: 1})
//	j := &sched.Job{Model: m, Class: sched.RT, In: input, Out: output}
//	err = s.Submit(j)   // returns at once
//	err = j.Wait()      // or set j.Done
//	st := s.Stats()     // preemptions and their latency, padding, ...
//	s.Close()
//
// A Scheduler owns a pool of units (pinned worker threads of native/cpu)
// and the streams its policy needs. Load compiles a model (libml/engine)
// for one batch size, loads its weights into C memory and profiles its
// kernels in every version (or takes a profile from tools/kprof,
// ModelOptions.Profile); optional metadata: idempotent groups traced by
// tools/idemcheck (ModelOptions.Idem) and SPLIT's cut points from
// tools/splitter (ModelOptions.Cuts). A Job is one inference: its class
// (RT or BE), its BE queue, its input and output. Jobs of a model run in
// activation arenas ("instances") made on demand, one per job in flight;
// the weights are shared. Every job records Submitted, Started,
// KernelStart, KernelEnd and Finished times (Now clock), its preemptions
// and the kernels a restore ran twice. Config.Policy picks the policy per
// scheduler; the appliance picks it per profile.
//
// # Mechanisms
//
// Streams. Every stream (native/cpu) has a virtual host queue and a device
// window: a segment of a job is pushed as one list of launches, and at most
// Config.Window (default 4) kernels are in the stream's ring at a time; the
// unit that completes a kernel moves the next one in. When a stream drains
// its unit writes an eventfd, so the lane's waiter (one goroutine per
// stream for the scheduler's life) parks in Go's poller rather than in a
// blocking cgo call; launching a segment starts and wakes no goroutine.
//
// Queues and modes (reef). One RT queue served one job at a time on the RT
// stream, Config.BEQueues BE queues each bound to its own stream. Normal
// mode runs the BE streams concurrently; an RT arrival switches to RT mode;
// an empty RT queue switches back.
//
// Preemption. BE streams run each kernel in a version with short blocks
// (Config.PreemptBlockNs, PreemptSlack): a running block stops only at its
// next in-loop check. Where even that version's blocks run longer than
// Config.PreemptCheckNs, BE streams run a copy of the kernel that checks
// about BlockNs / PreemptCheckNs times per block (GEMM and CONV split the
// block's sgemm over rows, columns and the reduction; other kernels
// check per row or plane already). The RT job is bound (instance, input)
// before the preempt calls and launched right after them; padding is set
// up after the launch. Entering RT mode preempts every running BE stream: its host
// queue is detached in O(1) and handed to a collector thread that frees it
// off the critical path; its preemption flag is set, so queued blocks exit
// at their prologue and running blocks at their next in-loop check. The RT
// job is launched at once. Stats.PreemptNs holds, per RT-mode entry, the
// time from the first preempt call until no block of a preempted stream
// runs any more and the RT job's first kernel has started (the queued
// kernels of preempted streams are dropped lazily, when a unit passes by).
//
// Restore. When a preempted stream has drained, the scheduler reads its
// execution index (the last kernel a block started) and restarts the job
// there if that kernel is idempotent, else at the first kernel of its
// minimal idempotent group (REEF §4.4; a restart at kernel 0 copies the
// input in again). Groups come from the compiler's static analysis or from
// tools/idemcheck, which traces each kernel's reads and writes
// (TraceIdempotence). PreemptRestore preempts and restores running BE
// work on demand (a probe of the mechanism).
//
// Padding. While an RT kernel leaves units idle (every one of its blocks
// is claimed, or it has fewer blocks than units), the idle units run
// blocks of the suspended BE jobs. Units pick the blocks themselves, in C,
// when they find no other work: a block qualifies only if its profiled
// time is below the RT kernel's remaining time (rule 1) and if the RT
// kernel's bandwidth plus the block's stays within the machine's (rule 2:
// Config.PadBudgetMBs; the CPU stand-in for REEF's occupancy rule — blocks
// never share a unit with the RT kernel, so memory bandwidth is what they
// could take from it). A BE kernel exists in several versions (tilings
// for different unit counts; ModelOptions.Versions), pruned by dominance
// (REEF §5.3); the fitting version with the shortest kernel time is
// chosen when the kernel's first block is padded, and kept until the
// kernel completes. When RT mode ends, jobs resume where padding left
// them (a kernel half done by padding continues in its version).
// Stats.PadSelect counts selections, their time and rule rejections.
//
// # Policies
//
//   - reef: the mechanisms above (Config.NoPadding turns padding off).
//   - seq: one job at a time on one stream, the oldest RT job first, then
//     the BE queues in turn; no preemption (Clockwork-like).
//   - conc: every queue on its own stream, all at once, no priority
//     (multi-stream, Triton-like).
//   - srpt: Paella §6 on one stream: each decision dispatches about
//     Config.QuantumNs of profiled kernels of the job with the shortest
//     remaining time; deficit counters per user (Job.User) switch to the
//     oldest job of the user with the largest deficit once it exceeds
//     Config.FairThreshold kernels. Classes are not looked at.
//   - split: SPLIT §3.4 on one stream: models run as blocks of kernels cut
//     by SplitModel / SplitBest (genetic algorithm, fitness eq. 2), a new
//     job moves ahead of its neighbours while that lowers their summed
//     response ratio (never past a job of its own model), and the head of
//     the queue runs its next block: preemption at block boundaries.
//     Config.Alpha sets the latency target (Alpha x standalone time).
//     The response ratio is linear in a job's wait, so the wait a queued
//     job has done cancels out of the pair's comparison: a new job passes
//     a queued one iff rem x ext is smaller for it (Smith's rule), however
//     long the queued one has waited. A closed-loop stream of shorter jobs
//     therefore starves a long job; that is the paper's rule (its
//     evaluation uses open-loop arrivals), not a slip here.
//
// tools/disb runs REEF's DISB workloads under every policy; the numbers are
// in docs/benchmarks.md.
package sched
