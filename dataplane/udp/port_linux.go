//go:build linux

package udp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

// ctrlLen is the control-message room per received datagram: one
// SO_RXQ_OVFL message carrying a uint32 (CMSG_SPACE(4) is 24 bytes on
// 64-bit Linux), rounded up to keep every slot 8-byte aligned.
const ctrlLen = 32

// mmsghdr mirrors struct mmsghdr (sys/socket.h).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32 // bytes received or sent for this message
}

// Port is a dataplane.Port over one UDP socket. It also implements
// dataplane.Waiter.
type Port struct {
	cfg    Config
	conn   *net.UDPConn
	rc     syscall.RawConn
	family int            // unix.AF_INET or unix.AF_INET6
	local  netip.AddrPort // bound address, Endpoint.Local of every packet
	efd    int            // eventfd, readable once Close has begun
	closed atomic.Bool
	// wfd is the eventfd Wake writes and Wait drains; wakeMu keeps Close
	// from closing it under a Wake.
	wfd    int
	wakeMu sync.RWMutex
	// errClosed is returned by every call after Close.
	errClosed error

	pool *pool
	zone zoneCache
	// cmsgHdrLen is CMSG_LEN(0): where a control message's data starts.
	cmsgHdrLen int

	// Receive side: preallocated recvmmsg vectors, one slot per burst entry.
	rxHdrs  []mmsghdr
	rxIovs  []unix.Iovec
	rxNames []unix.RawSockaddrInet6
	rxCtrl  []uint64 // ctrlLen bytes per slot, 8-byte aligned
	rxFn    func(fd uintptr)
	rxVlen  int
	rxGot   int
	rxErrno syscall.Errno
	// lastDrops is the last SO_RXQ_OVFL value seen (the socket's cumulative
	// drop count, modulo 2^32).
	lastDrops uint32

	// Transmit side: preallocated sendmmsg vectors, two iovecs per message
	// (header, payload).
	txHdrs  []mmsghdr
	txIovs  []unix.Iovec
	txNames []unix.RawSockaddrInet6
	txFn    func(fd uintptr)
	txVlen  int
	txDone  int
	txErrno syscall.Errno
	txShut  bool // Close began while the send waited

	// Wait: ppoll on the socket, the close eventfd and the wake eventfd
	// (wpfds); TxBurst: on the socket and the close eventfd (pfds).
	pfds      []unix.PollFd
	wpfds     []unix.PollFd
	ts        unix.Timespec
	waitNS    int64
	waitFn    func(fd uintptr)
	waitErrno syscall.Errno

	rxPackets  atomic.Uint64
	rxBytes    atomic.Uint64
	txPackets  atomic.Uint64
	txBytes    atomic.Uint64
	rxFiltered atomic.Uint64
	rxMissed   atomic.Uint64
	txFailed   atomic.Uint64
	rxTrunc    atomic.Uint64
	rxCalls    atomic.Uint64
	txCalls    atomic.Uint64
	rxNoBuf    atomic.Uint64
	txBlocked  atomic.Uint64
	rcvBuf     int
	sndBuf     int
}

var (
	_ dataplane.Port   = (*Port)(nil)
	_ dataplane.Waiter = (*Port)(nil)
	_ dataplane.Waker  = (*Port)(nil)
)

// listenTarget returns the network and address to hand to ListenPacket:
// udp4 or udp6 for an IP address, "udp" (dual-stack when the host is empty,
// resolved otherwise) for anything else.
func listenTarget(cfg Config) (network, address string, err error) {
	ap := cfg.Addr
	if !ap.IsValid() {
		if cfg.Listen == "" {
			return "", "", errors.New("udp: no listen address")
		}
		if ap, err = netip.ParseAddrPort(cfg.Listen); err != nil {
			if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
				return "", "", fmt.Errorf("udp: listen address: %w", err)
			}
			return "udp", cfg.Listen, nil
		}
	}
	if ap.Addr().Is4In6() {
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	if ap.Addr().Is4() {
		return "udp4", ap.String(), nil
	}
	return "udp6", ap.String(), nil
}

// setBuffer sets a socket buffer size, trying the FORCE variant first (it
// ignores the sysctl maximum but needs CAP_NET_ADMIN).
func setBuffer(fd, force, plain, size int) error {
	if size < 0 {
		return nil
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size) == nil {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size)
}

// setOptions applies cfg's socket options to a fresh socket.
func setOptions(fd int, cfg Config) error {
	if err := setBuffer(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, cfg.RecvBuffer); err != nil {
		return fmt.Errorf("SO_RCVBUF %d: %w", cfg.RecvBuffer, err)
	}
	if err := setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, cfg.SendBuffer); err != nil {
		return fmt.Errorf("SO_SNDBUF %d: %w", cfg.SendBuffer, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1); err != nil {
		return fmt.Errorf("SO_RXQ_OVFL: %w", err)
	}
	if cfg.ReusePort {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return fmt.Errorf("SO_REUSEPORT: %w", err)
		}
	}
	return nil
}

// Open binds a UDP socket as cfg describes and returns the port. ctx bounds
// the bind (it matters only for host names).
func Open(ctx context.Context, cfg Config) (*Port, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	network, address, err := listenTarget(cfg)
	if err != nil {
		return nil, err
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = setOptions(int(fd), cfg) }); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(ctx, network, address)
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	conn := pc.(*net.UDPConn)
	p := &Port{cfg: cfg, conn: conn, efd: -1, wfd: -1, cmsgHdrLen: unix.CmsgLen(0)}
	if err := p.init(); err != nil {
		conn.Close()
		if p.efd >= 0 {
			unix.Close(p.efd)
		}
		if p.wfd >= 0 {
			unix.Close(p.wfd)
		}
		return nil, err
	}
	return p, nil
}

// init finishes Open: socket facts, the eventfd and the preallocated
// vectors.
func (p *Port) init() error {
	rc, err := p.conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("udp: %w", err)
	}
	p.rc = rc
	var serr error
	err = rc.Control(func(fd uintptr) {
		var sa unix.Sockaddr
		sa, serr = unix.Getsockname(int(fd))
		if serr != nil {
			return
		}
		switch sa.(type) {
		case *unix.SockaddrInet4:
			p.family = unix.AF_INET
		case *unix.SockaddrInet6:
			p.family = unix.AF_INET6
		default:
			serr = fmt.Errorf("unexpected socket address %T", sa)
			return
		}
		if p.rcvBuf, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF); serr != nil {
			return
		}
		p.sndBuf, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("udp: socket: %w", err)
	}
	la := p.conn.LocalAddr().(*net.UDPAddr).AddrPort()
	if p.family == unix.AF_INET {
		la = netip.AddrPortFrom(la.Addr().Unmap(), la.Port())
	}
	p.local = la
	p.errClosed = fmt.Errorf("udp: port %v: %w", la, net.ErrClosed)
	p.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("udp: eventfd: %w", err)
	}
	p.wfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("udp: eventfd: %w", err)
	}

	b := p.cfg.Burst
	p.pool = newPool(p.cfg.BufCount, p.cfg.BufSize)

	p.rxHdrs = make([]mmsghdr, b)
	p.rxIovs = make([]unix.Iovec, b)
	p.rxNames = make([]unix.RawSockaddrInet6, b)
	p.rxCtrl = make([]uint64, b*ctrlLen/8)
	for i := range p.rxHdrs {
		h := &p.rxHdrs[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&p.rxNames[i]))
		h.Iov = &p.rxIovs[i]
		h.SetIovlen(1)
		h.Control = (*byte)(unsafe.Pointer(&p.rxCtrl[i*ctrlLen/8]))
	}
	p.txHdrs = make([]mmsghdr, b)
	p.txIovs = make([]unix.Iovec, 2*b)
	p.txNames = make([]unix.RawSockaddrInet6, b)
	for i := range p.txHdrs {
		h := &p.txHdrs[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&p.txNames[i]))
		h.Iov = &p.txIovs[2*i]
	}
	p.pfds = make([]unix.PollFd, 2)
	p.pfds[1] = unix.PollFd{Fd: int32(p.efd), Events: unix.POLLIN}
	p.wpfds = make([]unix.PollFd, 3)
	p.wpfds[1] = unix.PollFd{Fd: int32(p.efd), Events: unix.POLLIN}
	p.wpfds[2] = unix.PollFd{Fd: int32(p.wfd), Events: unix.POLLIN}
	p.rxFn = p.recv
	p.txFn = p.send
	p.waitFn = p.poll
	return nil
}

// LocalAddr returns the address the port is bound to.
func (p *Port) LocalAddr() netip.AddrPort { return p.local }

// RxBurst receives up to min(len(pkts), Config.Burst) datagrams with one
// recvmmsg call and never blocks. It returns fewer, or none, when the buffer
// pool runs low; the rest stay in the socket's receive queue.
func (p *Port) RxBurst(pkts []dataplane.Packet) (int, error) {
	if p.closed.Load() {
		return 0, p.errClosed
	}
	free := p.pool.free
	k := min(len(pkts), p.cfg.Burst, len(free))
	if k == 0 {
		if len(free) == 0 && len(pkts) != 0 {
			p.rxNoBuf.Add(1)
		}
		return 0, nil
	}
	base := len(free) - k
	for i := range k {
		buf := p.pool.buf(free[base+i])
		p.rxIovs[i].Base = &buf[0]
		p.rxIovs[i].SetLen(len(buf))
		h := &p.rxHdrs[i].hdr
		h.Namelen = unix.SizeofSockaddrInet6
		h.SetControllen(ctrlLen)
		h.Flags = 0
	}
	p.rxVlen = k
	if err := p.rc.Control(p.rxFn); err != nil {
		return 0, p.errClosed
	}
	m := p.rxGot
	if p.rxErrno != 0 {
		if p.rxErrno == unix.EAGAIN {
			return 0, nil
		}
		return 0, fmt.Errorf("udp: recvmmsg: %w", p.rxErrno)
	}

	// Hand out the buffers that received a good datagram and compact the
	// others (unused or truncated) back onto the free list.
	n, w := 0, base
	var bytes, trunc uint64
	for i := range k {
		idx := free[base+i]
		mh := &p.rxHdrs[i]
		if i >= m || mh.hdr.Flags&unix.MSG_TRUNC != 0 {
			if i < m {
				trunc++
			}
			free[w] = idx
			w++
			continue
		}
		if mh.hdr.Controllen != 0 {
			p.readCtrl(i, int(mh.hdr.Controllen))
		}
		pkt := &pkts[n]
		pkt.Data = p.pool.data(idx, int(mh.n))
		pkt.Buf = dataplane.BufRef(idx)
		pkt.From = dataplane.Endpoint{
			Addr:  parseSockaddr(&p.rxNames[i], &p.zone),
			Local: p.local,
		}
		p.pool.out[idx] = true
		bytes += uint64(mh.n)
		n++
	}
	p.pool.free = free[:w]
	if n != 0 {
		p.pool.inUse.Add(uint64(n))
		p.rxPackets.Add(uint64(n))
		p.rxBytes.Add(bytes)
	}
	if trunc != 0 {
		p.rxTrunc.Add(trunc)
		p.rxFiltered.Add(trunc)
	}
	return n, nil
}

// recv is the RawConn.Control body of RxBurst.
func (p *Port) recv(fd uintptr) {
	for {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&p.rxHdrs[0])),
			uintptr(p.rxVlen), unix.MSG_DONTWAIT, 0, 0)
		p.rxCalls.Add(1)
		if e == unix.EINTR {
			continue
		}
		p.rxGot, p.rxErrno = int(r), e
		return
	}
}

// readCtrl picks the SO_RXQ_OVFL drop counter out of slot i's control
// messages and folds its growth into RxMissed.
func (p *Port) readCtrl(i, n int) {
	ctrl := unsafe.Slice((*byte)(unsafe.Pointer(&p.rxCtrl[i*ctrlLen/8])), ctrlLen)[:min(n, ctrlLen)]
	for len(ctrl) >= p.cmsgHdrLen {
		c := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[0]))
		l := int(c.Len)
		if l < p.cmsgHdrLen || l > len(ctrl) {
			return
		}
		if c.Level == unix.SOL_SOCKET && c.Type == unix.SO_RXQ_OVFL && l >= p.cmsgHdrLen+4 {
			v := *(*uint32)(unsafe.Pointer(&ctrl[p.cmsgHdrLen]))
			if d := v - p.lastDrops; int32(d) > 0 {
				p.rxMissed.Add(uint64(d))
				p.lastDrops = v
			}
		}
		sp := unix.CmsgSpace(l - p.cmsgHdrLen)
		if sp > len(ctrl) {
			return
		}
		ctrl = ctrl[sp:]
	}
}

// Release gives receive buffers back to the pool. References that are out
// of range or already free are counted (DriverStats) and ignored.
func (p *Port) Release(bufs []dataplane.BufRef) {
	p.pool.release(bufs)
}

// TxBurst sends dgs, each as its header followed by its payload (gathered
// by the kernel, not copied here), with one sendmmsg call per Config.Burst
// datagrams (more only when the kernel sends part of a burst). When the
// send buffer is full it waits up to Config.TxWait for room.
//
// It returns how many datagrams were sent: always a prefix of dgs. The
// rest are counted in TxFailed. The error says why dgs[n] was not sent:
// ErrTxBlocked, an address this socket cannot reach, or the kernel's
// error for that datagram (EMSGSIZE, ENETUNREACH, ...).
func (p *Port) TxBurst(dgs []dataplane.Datagram) (int, error) {
	if len(dgs) == 0 {
		return 0, nil
	}
	if p.closed.Load() {
		p.txFailed.Add(uint64(len(dgs)))
		return 0, p.errClosed
	}
	sent := 0
	var err error
	for sent < len(dgs) {
		chunk := dgs[sent:min(len(dgs), sent+p.cfg.Burst)]
		var n int
		n, err = p.sendChunk(chunk)
		sent += n
		if err != nil {
			break
		}
	}
	var bytes uint64
	for i := range sent {
		bytes += uint64(wire.HeaderLen + len(dgs[i].Payload))
	}
	if sent != 0 {
		p.txPackets.Add(uint64(sent))
		p.txBytes.Add(bytes)
	}
	if sent != len(dgs) {
		p.txFailed.Add(uint64(len(dgs) - sent))
	}
	return sent, err
}

// sendChunk sends up to Config.Burst datagrams and returns how many went.
func (p *Port) sendChunk(dgs []dataplane.Datagram) (int, error) {
	k := 0
	for i := range dgs {
		d := &dgs[i]
		h := &p.txHdrs[i].hdr
		nl := fillSockaddr(&p.txNames[i], p.family, d.To.Addr, &p.zone)
		if nl == 0 {
			break
		}
		h.Namelen = nl
		iov := p.txIovs[2*i : 2*i+2]
		iov[0].Base = &d.Header[0]
		iov[0].SetLen(wire.HeaderLen)
		if len(d.Payload) != 0 {
			iov[1].Base = &d.Payload[0]
			iov[1].SetLen(len(d.Payload))
			h.SetIovlen(2)
		} else {
			h.SetIovlen(1)
		}
		k++
	}
	p.txVlen, p.txDone, p.txErrno, p.txShut = k, 0, 0, false
	if k != 0 {
		if err := p.rc.Control(p.txFn); err != nil {
			p.txErrno = 0
			p.txShut = true
		}
		// Drop references to the caller's memory.
		for i := range 2 * k {
			p.txIovs[i].Base = nil
		}
	}
	done := p.txDone
	switch {
	case p.txShut:
		return done, p.errClosed
	case done == len(dgs):
		return done, nil
	case done < k && p.txErrno == unix.EAGAIN:
		return done, ErrTxBlocked
	case done < k:
		return done, fmt.Errorf("udp: sendmmsg to %v: %w", dgs[done].To.Addr, p.txErrno)
	default: // done == k < len(dgs): dgs[k] has no usable address
		return done, fmt.Errorf("udp: cannot send to %v from a socket bound to %v", dgs[k].To.Addr, p.local)
	}
}

// send is the RawConn.Control body of TxBurst: it sends txHdrs[txDone:txVlen],
// retrying on EINTR and partial sends and waiting (bounded by TxWait) when
// the send buffer is full. It stops at the first datagram the kernel
// refuses.
func (p *Port) send(fd uintptr) {
	var deadline time.Time
	for p.txDone < p.txVlen {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&p.txHdrs[p.txDone])),
			uintptr(p.txVlen-p.txDone), unix.MSG_DONTWAIT, 0, 0)
		p.txCalls.Add(1)
		switch e {
		case 0:
			p.txDone += int(r)
			continue
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			p.txBlocked.Add(1)
			if p.cfg.TxWait < 0 {
				p.txErrno = e
				return
			}
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(p.cfg.TxWait)
			}
			left := deadline.Sub(now)
			if left <= 0 {
				p.txErrno = e
				return
			}
			p.pfds[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT}
			p.ts = unix.NsecToTimespec(int64(left))
			ppoll(p.pfds, &p.ts)
			if p.pfds[1].Revents != 0 {
				p.txShut = true
				return
			}
		default:
			p.txErrno = e
			return
		}
	}
}

// ppoll waits on fds until one is ready or ts passes (nil: no limit).
// EINTR counts as a wakeup.
func ppoll(fds []unix.PollFd, ts *unix.Timespec) syscall.Errno {
	for i := range fds {
		fds[i].Revents = 0
	}
	_, _, e := unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
		uintptr(unsafe.Pointer(ts)), 0, 0, 0)
	if e == unix.EINTR {
		e = 0
	}
	return e
}

// Wait blocks until a datagram may be ready to receive, timeoutNS
// nanoseconds pass, or the port is closed. A negative timeout waits without
// limit; zero returns at once. It sleeps in the kernel (ppoll on the socket
// and on an eventfd that Close signals), so an idle I/O loop costs nothing.
// A timeout is not an error; after Close, Wait returns an error matching
// net.ErrClosed.
//
// While the buffer pool is empty RxBurst cannot take a datagram, so Wait
// ignores the socket: it sleeps for the whole timeout, or returns at once
// when the timeout is negative (only the caller's Release can help then).
func (p *Port) Wait(timeoutNS int64) error {
	if p.closed.Load() {
		return p.errClosed
	}
	if timeoutNS == 0 || timeoutNS < 0 && len(p.pool.free) == 0 {
		return nil
	}
	p.waitNS = timeoutNS
	if err := p.rc.Control(p.waitFn); err != nil || p.closed.Load() {
		return p.errClosed
	}
	if p.waitErrno != 0 {
		return fmt.Errorf("udp: ppoll: %w", p.waitErrno)
	}
	return nil
}

// poll is the RawConn.Control body of Wait.
func (p *Port) poll(fd uintptr) {
	p.wpfds[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	if len(p.pool.free) == 0 {
		p.wpfds[0].Fd = -1 // poll(2) skips negative descriptors
	}
	var ts *unix.Timespec
	if p.waitNS > 0 {
		p.ts = unix.NsecToTimespec(p.waitNS)
		ts = &p.ts
	}
	p.waitErrno = ppoll(p.wpfds, ts)
	if p.wpfds[2].Revents != 0 {
		var b [8]byte
		_, _ = unix.Read(p.wfd, b[:]) // reset the wake counter
	}
}

// Wake makes a running or the next Wait return (dataplane.Waker).
func (p *Port) Wake() {
	p.wakeMu.RLock()
	defer p.wakeMu.RUnlock()
	if p.wfd < 0 {
		return // closed
	}
	one := [8]byte{1}
	_, _ = unix.Write(p.wfd, one[:]) // EAGAIN: the counter is already set
}

// Stats returns the port's counters. RxMissed is the socket's drop count
// as last reported by the kernel (see the package documentation).
func (p *Port) Stats() dataplane.PortStats {
	return dataplane.PortStats{
		RxPackets:   p.rxPackets.Load(),
		RxBytes:     p.rxBytes.Load(),
		TxPackets:   p.txPackets.Load(),
		TxBytes:     p.txBytes.Load(),
		RxFiltered:  p.rxFiltered.Load(),
		RxMissed:    p.rxMissed.Load(),
		TxFailed:    p.txFailed.Load(),
		BufInUse:    p.pool.inUse.Load(),
		BufCapacity: uint64(p.pool.capacity()),
	}
}

// DriverStats returns the udp driver's own counters.
func (p *Port) DriverStats() DriverStats {
	return DriverStats{
		RxTruncated:    p.rxTrunc.Load(),
		RxSyscalls:     p.rxCalls.Load(),
		TxSyscalls:     p.txCalls.Load(),
		RxNoBuf:        p.rxNoBuf.Load(),
		TxBlocked:      p.txBlocked.Load(),
		DoubleRelease:  p.pool.doubles.Load(),
		ForeignRelease: p.pool.foreign.Load(),
		RecvBuffer:     p.rcvBuf,
		SendBuffer:     p.sndBuf,
	}
}

// Close closes the socket, waking a blocked Wait or TxBurst. Buffers still
// held by callers stay valid memory, but should be released first. Close
// may be called from any goroutine, more than once.
func (p *Port) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	one := [8]byte{1}
	_, werr := unix.Write(p.efd, one[:]) // wake Wait and TxBurst
	// conn.Close returns once no RawConn.Control call is running, so the
	// eventfd is no longer in use when it is closed below.
	err := p.conn.Close()
	if cerr := unix.Close(p.efd); err == nil {
		err = cerr
	}
	p.wakeMu.Lock()
	if cerr := unix.Close(p.wfd); err == nil {
		err = cerr
	}
	p.wfd = -1
	p.wakeMu.Unlock()
	if err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("udp: close: %w", err)
	}
	return nil
}
