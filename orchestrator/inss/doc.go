// Package inss is InSS's interference-aware latency model (InSS §4): what
// a batch of a model costs on a device given the share of the device it
// has, the batch size and the models beside it, and how long a task
// waits for its result. It is the simulator InSS's two-stage scheduler
// learns against and the yardstick its placement is judged by.
//
// The model, per DNN model i on device k:
//
//   - execution latency t_inf = t_d + t_c + t_r: the data upload (on a
//     GPU over PCIe; on the cpu, gathering the batch into the model's
//     input) and the result feedback are linear in the batch size,
//     t = α·b + β (Linear, fitted by least squares);
//   - the computing time alone, o = LWR(b, share): locally weighted
//     linear regression (Cleveland and Devlin 1988) over the profiled
//     grid of batch sizes and shares (LWR);
//   - co-located, t_c = o·(1 + α_i·Σ_j e_j): each co-located model j
//     exerts a pressure e_j on the shared resources and model i is
//     sensitive to it by α_i. InSS takes e_j from L2 and DRAM
//     utilisation counters; here e_j is the measured slowdown model j
//     causes to a memory-streaming probe, and α_i is fitted by least
//     squares from i's co-located runs (FitSensitivity);
//   - a task's latency by InSS eq. 3 (TaskLatency): the remaining
//     execution of the batch in progress, the queue ahead of it in
//     whole batches, or the wait for enough tasks to fill a batch.
//
// Profiles are data (Profile, JSON): tools/inssprof measures them on the
// cpu device, where unit groups play the role of devices, and reports the
// model's error against measurement the way InSS Tables 3 and 4 do.
package inss
