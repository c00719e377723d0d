package udp

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Defaults and limits for Config.
const (
	// DefaultBurst is the number of datagrams per recvmmsg/sendmmsg call.
	DefaultBurst = 32
	// MaxBurst is the largest burst: the kernel caps recvmmsg and sendmmsg
	// vectors at UIO_MAXIOV (1024) messages.
	MaxBurst = 1024
	// DefaultBufCount is the number of receive buffers in the pool.
	DefaultBufCount = 2048
	// DefaultBufSize is the largest UDP payload an IPv4 datagram can carry
	// (65535 - 20 IPv4 - 8 UDP), so that jumbo datagrams fit.
	DefaultBufSize = 65535 - 28
	// DefaultRecvBuffer is the SO_RCVBUF size asked for by default.
	DefaultRecvBuffer = 8 << 20
	// DefaultSendBuffer is the SO_SNDBUF size asked for by default.
	DefaultSendBuffer = 4 << 20
	// DefaultTxWait is how long TxBurst waits in total for the socket to
	// become writable again when the send buffer is full.
	DefaultTxWait = time.Millisecond

	// maxSlab caps BufCount*BufSize so a typo cannot reserve the machine.
	maxSlab = 16 << 30
)

// Config configures a UDP port.
type Config struct {
	// Addr is the local address to bind. When it is valid it takes
	// precedence over Listen.
	Addr netip.AddrPort
	// Listen is the local address to bind as "host:port": "127.0.0.1:9000",
	// "[::1]:0", or ":9000" for a dual-stack socket on every address.
	// Used when Addr is the zero value.
	Listen string
	// Burst is the most datagrams one RxBurst or one sendmmsg call handles
	// (default DefaultBurst, at most MaxBurst).
	Burst int
	// BufCount is the number of receive buffers (default DefaultBufCount).
	BufCount int
	// BufSize is the size of each receive buffer in bytes (default
	// DefaultBufSize). Datagrams larger than this are dropped as truncated.
	BufSize int
	// RecvBuffer is the socket receive buffer size in bytes (SO_RCVBUF;
	// SO_RCVBUFFORCE is tried first so root can exceed net.core.rmem_max).
	// 0 means DefaultRecvBuffer; a negative value keeps the kernel default.
	RecvBuffer int
	// SendBuffer is the socket send buffer size in bytes (SO_SNDBUF, with
	// SO_SNDBUFFORCE tried first). 0 means DefaultSendBuffer; a negative
	// value keeps the kernel default.
	SendBuffer int
	// TxWait bounds how long one TxBurst waits for the send buffer to drain
	// when the kernel answers EAGAIN (default DefaultTxWait; negative: do
	// not wait).
	TxWait time.Duration
	// ReusePort sets SO_REUSEPORT so several ports can share one address
	// and the kernel spreads flows across them.
	ReusePort bool
}

// withDefaults returns c with zero fields replaced by their defaults, or an
// error when a field is out of range.
func (c Config) withDefaults() (Config, error) {
	if c.Burst == 0 {
		c.Burst = DefaultBurst
	}
	if c.BufCount == 0 {
		c.BufCount = DefaultBufCount
	}
	if c.BufSize == 0 {
		c.BufSize = DefaultBufSize
	}
	if c.RecvBuffer == 0 {
		c.RecvBuffer = DefaultRecvBuffer
	}
	if c.SendBuffer == 0 {
		c.SendBuffer = DefaultSendBuffer
	}
	if c.TxWait == 0 {
		c.TxWait = DefaultTxWait
	}
	switch {
	case c.Burst < 1 || c.Burst > MaxBurst:
		return c, fmt.Errorf("udp: burst %d out of range 1..%d", c.Burst, MaxBurst)
	case c.BufCount < 1 || c.BufCount > 1<<31-1:
		return c, fmt.Errorf("udp: buffer count %d out of range", c.BufCount)
	case c.BufSize < 1 || c.BufSize > 1<<20:
		return c, fmt.Errorf("udp: buffer size %d out of range 1..%d", c.BufSize, 1<<20)
	case uint64(c.BufCount)*uint64(stride(c.BufSize)) > maxSlab:
		return c, fmt.Errorf("udp: %d buffers of %d bytes exceed the %d-byte slab limit", c.BufCount, c.BufSize, uint64(maxSlab))
	}
	return c, nil
}

// DriverStats are the udp driver's own counters, beyond PortStats.
type DriverStats struct {
	// RxTruncated counts datagrams larger than BufSize (also in RxFiltered).
	RxTruncated uint64
	// RxSyscalls and TxSyscalls count recvmmsg and sendmmsg calls made.
	RxSyscalls uint64
	TxSyscalls uint64
	// RxNoBuf counts RxBurst calls that found the buffer pool empty and so
	// left datagrams in the kernel.
	RxNoBuf uint64
	// TxBlocked counts the times sendmmsg answered EAGAIN.
	TxBlocked uint64
	// DoubleRelease counts Release of buffers that were already free.
	DoubleRelease uint64
	// ForeignRelease counts Release of references this port never issued.
	ForeignRelease uint64
	// RecvBuffer and SendBuffer are the socket buffer sizes the kernel
	// reports (SO_RCVBUF, SO_SNDBUF: twice the requested size on Linux).
	RecvBuffer int
	SendBuffer int
}

// ErrTxBlocked is returned by TxBurst when the socket's send buffer stayed
// full for longer than Config.TxWait; the unsent datagrams are counted in
// TxFailed.
var ErrTxBlocked = errors.New("udp: socket send buffer full")
