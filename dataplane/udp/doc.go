// Package udp is the kernel-socket port driver: it receives sluice datagrams
// on one UDP socket with recvmmsg and sends with sendmmsg, one system call
// per burst, for hosts where DPDK is not available (non-root users, laptops).
//
// # Buffers
//
// The driver owns one slab of Config.BufCount receive buffers of
// Config.BufSize bytes and a free list of their indices; a Packet's Buf is the
// index of the buffer its Data lives in. RxBurst takes buffers from the free
// list for the datagrams it returns and Release puts them back. When the free
// list is empty RxBurst returns fewer packets (or none) and leaves the rest
// queued in the kernel's socket buffer, where the kernel drops them once the
// buffer is full; those drops show in PortStats.RxMissed.
//
// Release detects references it never handed out (foreign) and buffers that
// are already free (double release): both are counted in DriverStats and
// ignored, so the free list cannot be corrupted. The check is by index: a
// stale reference to a buffer that has since been handed out again is taken
// as a release of the new holder's buffer.
//
// # Counters
//
// RxMissed is the socket's drop counter (sk_drops), reported by the kernel
// through SO_RXQ_OVFL control messages. The kernel attaches it only to
// datagrams that are received after the first drop, so the value lags until
// the next datagram is read. Datagrams larger than BufSize arrive truncated
// (MSG_TRUNC); they are discarded and counted in RxFiltered.
//
// # Concurrency
//
// RxBurst, Release, TxBurst and Wait belong to one goroutine (the port's I/O
// loop); Stats, DriverStats and Close may be called from any goroutine. Close
// wakes a blocked Wait, which then returns an error that matches
// net.ErrClosed.
package udp
