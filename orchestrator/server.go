package orchestrator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	zmq "github.com/pebbe/zmq4"
)

// DefaultEndpoint is where the control server listens unless configured
// otherwise.
const DefaultEndpoint = "ipc:///run/sluice/control.sock"

// zapDomain is the ZAP domain of CURVE servers.
const zapDomain = "sluice"

// timeoutGrace is how long past a command's deadline the server waits for
// a handler that ignores its context before telling the client.
const timeoutGrace = 500 * time.Millisecond

// ServerConfig configures a Server. Zero fields take the defaults named.
type ServerConfig struct {
	// Endpoint is the ZeroMQ endpoint to bind: "ipc://PATH" (default
	// DefaultEndpoint) or "tcp://HOST:PORT" (port 0 picks a free port; see
	// Server.Endpoint).
	Endpoint string
	// CurveServerSecretKey (Z85, 40 characters) turns on CURVE encryption
	// and client authentication. Required for tcp:// unless Insecure.
	CurveServerSecretKey string
	// CurvePublicKey is the server's public key; optional, it is derived
	// from the secret key and, when given, checked against it.
	CurvePublicKey string
	// AllowedClientKeys are the Z85 public keys of the clients allowed to
	// connect with CURVE; "*" allows any client that knows the server's
	// public key. Required with CURVE.
	AllowedClientKeys []string
	// Insecure allows a tcp:// endpoint without CURVE: anyone who can reach
	// the port can steer the appliance.
	Insecure bool
	// SocketMode is the ipc socket file's permission bits (default 0660).
	SocketMode os.FileMode
	// CommandTimeout bounds each command (default 30s; drain's own
	// timeout_ms extends it).
	CommandTimeout time.Duration
	// ProgressInterval is how often the waiters of a command that has not
	// finished (queued or running) get a progress notice, a reply with
	// Running set (default 2s). Clients keep waiting while notices come.
	ProgressInterval time.Duration
	// ShutdownTimeout bounds how long Run, once its context ends, waits
	// for running commands (default 5s). A handler still running then is
	// abandoned: its waiters are answered CodeUnavailable and Run returns;
	// the handler's goroutine finishes on its own.
	ShutdownTimeout time.Duration
	// MaxRequestBytes caps a request frame (default 1 MiB). Larger ones up
	// to 4× the cap get a bad_request reply; beyond that libzmq drops the
	// connection.
	MaxRequestBytes int
	// QueueLen bounds the mutating commands waiting to run (default 64);
	// beyond it requests get CodeUnavailable.
	QueueLen int
	// MaxConcurrentStatus bounds status commands running at once
	// (default 4).
	MaxConcurrentStatus int
	// ReplyCacheSize is how many recent replies are kept per client for
	// retries (default 256); ReplyCacheClients bounds the clients
	// remembered (default 1024); ReplyCacheTTL is how long a reply is kept
	// (default 10 minutes).
	ReplyCacheSize    int
	ReplyCacheClients int
	ReplyCacheTTL     time.Duration
}

func (c *ServerConfig) setDefaults() {
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.SocketMode == 0 {
		c.SocketMode = 0o660
	}
	if c.CommandTimeout <= 0 {
		c.CommandTimeout = 30 * time.Second
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = 2 * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 5 * time.Second
	}
	if c.QueueLen <= 0 {
		c.QueueLen = 64
	}
	if c.MaxConcurrentStatus <= 0 {
		c.MaxConcurrentStatus = 4
	}
	if c.ReplyCacheSize <= 0 {
		c.ReplyCacheSize = 256
	}
	if c.ReplyCacheClients <= 0 {
		c.ReplyCacheClients = 1024
	}
	if c.ReplyCacheTTL <= 0 {
		c.ReplyCacheTTL = 10 * time.Minute
	}
}

// Server is the control server. Create it with NewServer, then call Run
// (once); Listen may be called before Run to bind early and learn the
// endpoint.
type Server struct {
	cfg       ServerConfig
	h         Handler
	log       *slog.Logger
	cmds      map[string]*command
	publicKey string
	allowAny  bool
	allowed   map[string]bool

	mu       sync.Mutex // guards state and endpoint
	state    serverState
	endpoint string

	// ZeroMQ objects; the sockets other than wakeTx belong to the
	// goroutine running Run; wakeTx is used under resMu by any goroutine
	// (the mutex provides the memory barrier libzmq needs to move a socket
	// between threads).
	zctx   *zmq.Context
	router *zmq.Socket
	zap    *zmq.Socket
	wakeRx *zmq.Socket
	wakeTx *zmq.Socket
	// ipcPath and ipcFile identify the bound ipc socket file.
	ipcPath string
	ipcFile os.FileInfo

	// runCtx is the context commands derive from; set before any
	// goroutine that reads it starts.
	runCtx context.Context
	// Worker goroutines post results here and send one message on
	// wakeTx (unless one is pending) so that the socket goroutine's poll
	// returns.
	resMu       sync.Mutex
	results     []result
	wakePending bool

	serial    chan *job     // mutating commands, in order
	statusSem chan struct{} // status commands running
	wg        sync.WaitGroup
	// abandon is closed when Run stops waiting for running commands.
	abandon chan struct{}

	// inflight are the accepted commands without a final reply, with the
	// time their waiters last heard of them (socket goroutine only).
	inflight map[*job]time.Time

	cache *replyCache // socket goroutine only
	// refusals is when each refused CURVE key was last logged (socket
	// goroutine only).
	refusals map[string]time.Time
}

type serverState int

const (
	stateNew serverState = iota
	stateListening
	stateRunning
	stateStopped
)

// job is one accepted command.
type job struct {
	identity string
	id       string
	cmd      *command
	args     any
	entry    *cacheEntry
	received time.Time
	// started is when the command started running (UnixNano; 0 while
	// queued).
	started atomic.Int64
}

// result is a reply for a job's waiters; a non-final one (a timeout
// notice) leaves the command running.
type result struct {
	job   *job
	reply []byte
	final bool
}

// NewServer checks cfg and returns a server for h. A nil logger discards
// logs. Nothing is bound until Listen or Run.
func NewServer(cfg ServerConfig, h Handler, logger *slog.Logger) (*Server, error) {
	if h == nil {
		return nil, errors.New("orchestrator: NewServer: nil handler")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg.setDefaults()
	s := &Server{
		cfg:       cfg,
		h:         h,
		log:       logger.With("component", "control"),
		cmds:      commandTable(),
		serial:    make(chan *job, cfg.QueueLen),
		statusSem: make(chan struct{}, cfg.MaxConcurrentStatus),
		cache:     newReplyCache(cfg.ReplyCacheSize, cfg.ReplyCacheClients, cfg.ReplyCacheTTL),
		refusals:  make(map[string]time.Time),
		abandon:   make(chan struct{}),
		inflight:  make(map[*job]time.Time),
	}
	scheme, _, ok := strings.Cut(cfg.Endpoint, "://")
	if !ok || (scheme != "ipc" && scheme != "tcp") {
		return nil, fmt.Errorf("orchestrator: endpoint %q: want ipc://PATH or tcp://HOST:PORT", cfg.Endpoint)
	}
	if cfg.CurveServerSecretKey != "" {
		if !zmq.HasCurve() {
			return nil, errors.New("orchestrator: CURVE requested but libzmq was built without CURVE support")
		}
		if err := checkKey(cfg.CurveServerSecretKey); err != nil {
			return nil, fmt.Errorf("orchestrator: CurveServerSecretKey: %w", err)
		}
		pub, err := zmq.AuthCurvePublic(cfg.CurveServerSecretKey)
		if err != nil {
			return nil, fmt.Errorf("orchestrator: deriving the CURVE public key: %w", err)
		}
		if cfg.CurvePublicKey != "" && cfg.CurvePublicKey != pub {
			return nil, errors.New("orchestrator: CurvePublicKey does not belong to CurveServerSecretKey")
		}
		s.publicKey = pub
		if len(cfg.AllowedClientKeys) == 0 {
			return nil, errors.New(`orchestrator: CURVE needs AllowedClientKeys (client public keys, or "*" for any client)`)
		}
		s.allowed = make(map[string]bool, len(cfg.AllowedClientKeys))
		for i, k := range cfg.AllowedClientKeys {
			if k == zmq.CURVE_ALLOW_ANY {
				s.allowAny = true
				continue
			}
			if err := checkKey(k); err != nil {
				return nil, fmt.Errorf("orchestrator: AllowedClientKeys[%d]: %w", i, err)
			}
			s.allowed[k] = true
		}
	} else {
		if cfg.CurvePublicKey != "" || len(cfg.AllowedClientKeys) > 0 {
			return nil, errors.New("orchestrator: CurvePublicKey and AllowedClientKeys need CurveServerSecretKey")
		}
		if scheme == "tcp" && !cfg.Insecure {
			return nil, fmt.Errorf("orchestrator: endpoint %s: tcp needs CURVE (CurveServerSecretKey and AllowedClientKeys) unless Insecure is set", cfg.Endpoint)
		}
	}
	return s, nil
}

// PublicKey returns the server's CURVE public key ("" without CURVE), for
// clients' ClientConfig.CurveServerKey.
func (s *Server) PublicKey() string { return s.publicKey }

// Endpoint returns the bound endpoint (with the port chosen for tcp port
// 0), or "" before Listen.
func (s *Server) Endpoint() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endpoint
}

// Listen binds the server's sockets. Run calls it when it has not been
// called.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateNew {
		return errors.New("orchestrator: Listen: server already listening or stopped")
	}
	if err := s.bind(); err != nil {
		s.closeSockets()
		return err
	}
	s.state = stateListening
	return nil
}

func (s *Server) bind() error {
	var err error
	if s.zctx, err = zmq.NewContext(); err != nil {
		return fmt.Errorf("orchestrator: zmq context: %w", err)
	}
	newSocket := func(t zmq.Type) (*zmq.Socket, error) {
		sock, err := s.zctx.NewSocket(t)
		if err != nil {
			return nil, fmt.Errorf("orchestrator: zmq socket: %w", err)
		}
		return sock, sock.SetLinger(0)
	}
	if s.publicKey != "" {
		// The ZAP handler must be bound before the ROUTER accepts
		// connections: without one, libzmq lets every CURVE client in.
		if s.zap, err = newSocket(zmq.REP); err != nil {
			return err
		}
		if err := s.zap.Bind("inproc://zeromq.zap.01"); err != nil {
			return fmt.Errorf("orchestrator: binding the ZAP handler: %w", err)
		}
	}
	if s.wakeRx, err = newSocket(zmq.PAIR); err != nil {
		return err
	}
	if err := s.wakeRx.Bind("inproc://sluice-orchestrator-wake"); err != nil {
		return fmt.Errorf("orchestrator: binding the wake socket: %w", err)
	}
	if s.wakeTx, err = newSocket(zmq.PAIR); err != nil {
		return err
	}
	if err := s.wakeTx.Connect("inproc://sluice-orchestrator-wake"); err != nil {
		return fmt.Errorf("orchestrator: connecting the wake socket: %w", err)
	}
	if s.router, err = newSocket(zmq.ROUTER); err != nil {
		return err
	}
	r := s.router
	// Linger a little so that replies posted while stopping get out.
	if err := r.SetLinger(200 * time.Millisecond); err != nil {
		return fmt.Errorf("orchestrator: ZMQ_LINGER: %w", err)
	}
	if err := r.SetRouterMandatory(1); err != nil {
		return fmt.Errorf("orchestrator: ZMQ_ROUTER_MANDATORY: %w", err)
	}
	// A client that reconnects with a fixed identity (to retry a request
	// id from a new process) takes the identity over instead of being
	// ignored while the server still holds the old connection.
	if err := r.SetRouterHandover(true); err != nil {
		return fmt.Errorf("orchestrator: ZMQ_ROUTER_HANDOVER: %w", err)
	}
	// Requests over the cap get an error reply; far over it, libzmq drops
	// the connection rather than buffer them.
	if err := r.SetMaxmsgsize(int64(4*s.cfg.MaxRequestBytes + 4096)); err != nil {
		return fmt.Errorf("orchestrator: ZMQ_MAXMSGSIZE: %w", err)
	}
	if s.publicKey != "" {
		if err := r.ServerAuthCurve(zapDomain, s.cfg.CurveServerSecretKey); err != nil {
			return fmt.Errorf("orchestrator: CURVE server setup: %w", err)
		}
	}
	ipcPath, isIPC := strings.CutPrefix(s.cfg.Endpoint, "ipc://")
	isIPC = isIPC && !strings.HasPrefix(ipcPath, "@") // abstract sockets have no file
	if isIPC {
		if err := prepareIPC(ipcPath); err != nil {
			return fmt.Errorf("orchestrator: endpoint %s: %w", s.cfg.Endpoint, err)
		}
	}
	if err := r.Bind(s.cfg.Endpoint); err != nil {
		return fmt.Errorf("orchestrator: binding %s: %w", s.cfg.Endpoint, err)
	}
	if isIPC {
		if err := os.Chmod(ipcPath, s.cfg.SocketMode); err != nil {
			return fmt.Errorf("orchestrator: endpoint %s: %w", s.cfg.Endpoint, err)
		}
		fi, err := os.Stat(ipcPath)
		if err != nil {
			return fmt.Errorf("orchestrator: endpoint %s: %w", s.cfg.Endpoint, err)
		}
		s.ipcPath, s.ipcFile = ipcPath, fi
	}
	ep, err := r.GetLastEndpoint()
	if err != nil {
		return fmt.Errorf("orchestrator: reading the bound endpoint: %w", err)
	}
	s.endpoint = ep
	return nil
}

// prepareIPC makes the socket's directory and refuses to take over a
// socket another live server listens on (libzmq would silently unlink it).
func prepareIPC(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, 200*time.Millisecond)
	if err == nil {
		c.Close()
		return fmt.Errorf("another server is listening on %s", path)
	}
	return nil // stale: libzmq replaces it
}

// closeSockets closes whatever bind created and ends the zmq context.
func (s *Server) closeSockets() {
	for _, sock := range []*zmq.Socket{s.router, s.zap, s.wakeRx, s.wakeTx} {
		if sock != nil {
			sock.Close()
		}
	}
	s.router, s.zap, s.wakeRx, s.wakeTx = nil, nil, nil, nil
	if s.zctx != nil {
		s.zctx.Term()
		s.zctx = nil
	}
	// libzmq leaves the socket file behind; remove it unless another
	// server has replaced it since.
	if s.ipcFile != nil {
		if fi, err := os.Stat(s.ipcPath); err == nil && os.SameFile(fi, s.ipcFile) {
			os.Remove(s.ipcPath)
		}
		s.ipcFile = nil
	}
}

// Close releases the sockets of a server that listens but was never run;
// after Run has started it does nothing (cancel Run's context instead).
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateNew || s.state == stateListening {
		s.closeSockets()
		s.state = stateStopped
	}
	return nil
}

// Run serves requests until ctx is done, then stops: commands not started
// yet are answered CodeUnavailable, running ones see their context
// canceled and are waited for, and the sockets are closed. It returns nil
// after a shutdown through ctx and an error when binding or the socket
// fails. Run may be called once.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.state == stateNew {
		if err := s.bind(); err != nil {
			s.closeSockets()
			s.state = stateStopped
			s.mu.Unlock()
			return err
		}
		s.state = stateListening
	}
	if s.state != stateListening {
		s.mu.Unlock()
		return errors.New("orchestrator: Run: server already running or stopped")
	}
	s.state = stateRunning
	s.mu.Unlock()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.runCtx = runCtx
	s.log.Info("control server listening", "endpoint", s.Endpoint(), "curve", s.publicKey != "")

	s.wg.Add(2)
	go s.executor()
	// The end of runCtx must wake the poll. Run always cancels runCtx, so
	// this runs exactly once and is waited for below.
	context.AfterFunc(runCtx, func() {
		defer s.wg.Done()
		s.poke()
	})

	err := s.loop(runCtx)

	// Stop: refuse what is queued, cancel what runs, wait (at most
	// ShutdownTimeout, then abandon what still runs), flush replies.
	cancel()
	close(s.serial)
	s.waitWorkers() // no goroutine but this one uses the sockets now
	s.deliverResults()
	s.closeSockets()
	s.mu.Lock()
	s.state = stateStopped
	s.mu.Unlock()
	s.log.Info("control server stopped", "endpoint", s.Endpoint())
	return err
}

// waitWorkers waits for the command goroutines; after ShutdownTimeout it
// tells the ones still waiting for a handler to give up (they answer
// their waiters and return), and waits for that.
func (s *Server) waitWorkers() {
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(s.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		close(s.abandon)
		<-done
	}
}

// loop is the socket goroutine's body.
func (s *Server) loop(ctx context.Context) error {
	poller := zmq.NewPoller()
	poller.Add(s.router, zmq.POLLIN)
	poller.Add(s.wakeRx, zmq.POLLIN)
	if s.zap != nil {
		poller.Add(s.zap, zmq.POLLIN)
	}
	tick := min(time.Second, s.cfg.ProgressInterval/2)
	for ctx.Err() == nil {
		polled, err := poller.Poll(tick)
		if err != nil {
			return fmt.Errorf("orchestrator: poll: %w", err)
		}
		for _, p := range polled {
			switch p.Socket {
			case s.router:
				if err := s.readRequests(); err != nil {
					return err
				}
			case s.zap:
				s.serveZAP()
			case s.wakeRx:
				for {
					if _, err := s.wakeRx.RecvBytes(zmq.DONTWAIT); err != nil {
						break
					}
				}
			}
		}
		s.deliverResults()
		s.sendProgress(time.Now())
	}
	return nil
}

// sendProgress tells the waiters of every command they have not heard of
// for ProgressInterval that it is still queued or running.
func (s *Server) sendProgress(now time.Time) {
	for j, last := range s.inflight {
		if now.Sub(last) < s.cfg.ProgressInterval || len(j.entry.waiters) == 0 {
			continue
		}
		s.inflight[j] = now
		var e *Error
		if st := j.started.Load(); st == 0 {
			e = Errorf(CodeUnavailable, "%s queued for %s behind other commands; its reply follows", j.cmd.name, roundDur(now.Sub(j.received)))
		} else {
			e = Errorf(CodeUnavailable, "%s still running after %s; its reply follows", j.cmd.name, roundDur(now.Sub(time.Unix(0, st))))
		}
		rep := marshalReply(Reply{ID: j.id, Running: true, Error: e})
		for _, env := range j.entry.waiters {
			s.send(env, rep)
		}
	}
}

// roundDur rounds a duration for messages.
func roundDur(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// readRequests handles the requests waiting on the ROUTER socket, a
// bounded number at a time.
func (s *Server) readRequests() error {
	for range 64 {
		frames, err := s.router.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			if zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN) {
				return nil
			}
			return fmt.Errorf("orchestrator: receiving: %w", err)
		}
		s.handle(frames)
	}
	return nil
}

// handle validates one request and dispatches it, or answers it at once.
func (s *Server) handle(frames [][]byte) {
	if len(frames) < 2 {
		return // an identity without a body: nothing to answer
	}
	identity := string(frames[0])
	var env [][]byte
	var body []byte
	switch {
	case len(frames) == 2:
		env, body = frames[:1], frames[1]
	case len(frames) == 3 && len(frames[1]) == 0: // REQ client
		env, body = frames[:2], frames[2]
	default:
		env = frames[:1]
		if len(frames[1]) == 0 {
			env = frames[:2]
		}
		s.refuse(env, identity, "", "", Errorf(CodeBadRequest, "want one JSON frame per request, got %d frames", len(frames)-len(env)))
		return
	}
	req, e := parseRequest(body, s.cfg.MaxRequestBytes)
	if e != nil {
		s.refuse(env, identity, req.ID, req.Cmd, e)
		return
	}
	cmd, ok := s.cmds[req.Cmd]
	if !ok {
		s.refuse(env, identity, req.ID, req.Cmd, Errorf(CodeUnknownCommand, "unknown command %.64q (commands: %s)", req.Cmd, strings.Join(Commands(), ", ")))
		return
	}
	args, e := cmd.decode(req.Args)
	if e != nil {
		s.refuse(env, identity, req.ID, req.Cmd, e)
		return
	}
	now := time.Now()
	hash := sha256.Sum256(body)
	if ent := s.cache.lookup(identity, req.ID, now); ent != nil {
		switch {
		case ent.hash != hash:
			s.refuse(env, identity, req.ID, req.Cmd, Errorf(CodeConflict, "request id %q was already used for a different request", req.ID))
		case ent.pending:
			ent.waiters = append(ent.waiters, env)
			s.log.Info("control command retried while running", "cmd", req.Cmd, "id", req.ID, "client", clientName(identity))
		default:
			s.send(env, ent.reply)
			s.log.Info("control command retried: replayed its reply", "cmd", req.Cmd, "id", req.ID, "client", clientName(identity))
		}
		return
	}
	j := &job{identity: identity, id: req.ID, cmd: cmd, args: args, received: now}
	j.entry = s.cache.start(identity, req.ID, hash, env)
	if cmd.mutating {
		select {
		case s.serial <- j:
			s.inflight[j] = now
		default:
			s.cache.forget(identity, j.entry)
			s.refuse(env, identity, req.ID, req.Cmd, Errorf(CodeUnavailable, "busy: %d commands queued; retry later", len(s.serial)))
		}
		return
	}
	select {
	case s.statusSem <- struct{}{}:
		s.inflight[j] = now
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.statusSem }()
			s.execute(j)
		}()
	default:
		s.cache.forget(identity, j.entry)
		s.refuse(env, identity, req.ID, req.Cmd, Errorf(CodeUnavailable, "busy: %d %s commands running; retry later", cap(s.statusSem), req.Cmd))
	}
}

// refuse answers a request that is not run.
func (s *Server) refuse(env [][]byte, identity, id, cmd string, e *Error) {
	s.log.Warn("control request refused", "cmd", cmd, "id", id, "client", clientName(identity), "code", e.Code, "error", e.Message)
	s.send(env, marshalReply(Reply{ID: id, Error: e}))
}

// send writes one reply; a client that has gone away is not an error.
func (s *Server) send(env [][]byte, body []byte) {
	if _, err := s.router.SendMessageDontwait(env, body); err != nil {
		s.log.Debug("control reply not delivered", "client", clientName(string(env[0])), "error", err)
	}
}

// executor runs mutating commands one at a time; after shutdown it
// answers the queued ones without running them.
func (s *Server) executor() {
	defer s.wg.Done()
	for j := range s.serial {
		if s.runCtx.Err() != nil {
			e := Errorf(CodeUnavailable, "%s not run: control server shutting down", j.cmd.name)
			s.post(result{job: j, reply: marshalReply(Reply{ID: j.id, Error: e}), final: true})
			continue
		}
		s.execute(j)
	}
}

type outcome struct {
	data any
	err  error
}

// execute runs one command under its time limit and posts its reply. If
// the handler overstays the limit, the waiters are told so (a progress
// notice) and the final reply goes to them and to the cache (and later
// retries) when it returns. When Run abandons running commands at
// shutdown, execute answers CodeUnavailable and returns without waiting
// for the handler.
func (s *Server) execute(j *job) {
	timeout := j.cmd.timeout(j.args, s.cfg.CommandTimeout)
	ctx, cancel := context.WithTimeout(s.runCtx, timeout)
	defer cancel()
	start := time.Now()
	j.started.Store(start.UnixNano())
	done := make(chan outcome, 1)
	go func() { done <- s.call(ctx, j) }()
	overrun := time.NewTimer(timeout + timeoutGrace)
	defer overrun.Stop()
	var o outcome
wait:
	for {
		select {
		case o = <-done:
			break wait
		case <-overrun.C:
			e := Errorf(CodeUnavailable, "%s still running after %s; retry with the same id for its result", j.cmd.name, timeout)
			s.post(result{job: j, reply: marshalReply(Reply{ID: j.id, Running: true, Error: e})})
			s.log.Warn("control command overran its timeout", "cmd", j.cmd.name, "id", j.id, "timeout", timeout)
		case <-s.abandon:
			e := Errorf(CodeUnavailable, "%s abandoned after %s: control server shutting down", j.cmd.name, roundDur(time.Since(start)))
			s.post(result{job: j, reply: marshalReply(Reply{ID: j.id, Error: e}), final: true})
			s.log.Error("control command still running at shutdown: abandoned", "cmd", j.cmd.name, "id", j.id,
				"client", clientName(j.identity), "running", time.Since(start))
			return
		}
	}
	rep := Reply{ID: j.id, OK: o.err == nil}
	attrs := []any{"cmd", j.cmd.name, "id", j.id, "client", clientName(j.identity),
		"duration", time.Since(start), "queued", start.Sub(j.received)}
	if o.err != nil {
		rep.Error = toError(o.err, j.cmd.name, timeout)
		s.log.Warn("control command failed", append(attrs, "code", rep.Error.Code, "error", rep.Error.Message)...)
	} else {
		data, err := encodeJSON(o.data)
		if err != nil {
			rep.OK = false
			rep.Error = Errorf(CodeInternal, "encoding the %s reply: %v", j.cmd.name, err)
			s.log.Error("control reply not encodable", append(attrs, "error", err)...)
		} else {
			rep.Data = data
			level := slog.LevelInfo
			if !j.cmd.mutating {
				level = slog.LevelDebug // status is polled; keep the log for changes
			}
			s.log.Log(context.Background(), level, "control command done", attrs...)
		}
	}
	s.post(result{job: j, reply: marshalReply(rep), final: true})
}

// call runs the handler, turning a panic into an internal error.
func (s *Server) call(ctx context.Context, j *job) (o outcome) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("control handler panicked", "cmd", j.cmd.name, "id", j.id, "panic", p, "stack", string(debug.Stack()))
			o = outcome{err: fmt.Errorf("%s handler panicked: %v", j.cmd.name, p)}
		}
	}()
	data, err := j.cmd.call(ctx, s.h, j.args)
	return outcome{data: data, err: err}
}

// post hands a result to the socket goroutine.
func (s *Server) post(r result) {
	s.resMu.Lock()
	defer s.resMu.Unlock()
	s.results = append(s.results, r)
	s.wakeLocked()
}

// poke wakes the socket goroutine (when Run's context ends).
func (s *Server) poke() {
	s.resMu.Lock()
	defer s.resMu.Unlock()
	s.wakeLocked()
}

// wakeLocked makes the socket goroutine's poll return; one pending
// wake-up is enough. resMu must be held.
func (s *Server) wakeLocked() {
	if s.wakePending || s.wakeTx == nil {
		return
	}
	if _, err := s.wakeTx.Send("", zmq.DONTWAIT); err == nil {
		s.wakePending = true
	}
}

// deliverResults sends posted replies to their waiters and records final
// ones in the reply cache.
func (s *Server) deliverResults() {
	s.resMu.Lock()
	rs := s.results
	s.results = nil
	s.wakePending = false
	s.resMu.Unlock()
	now := time.Now()
	for _, r := range rs {
		e := r.job.entry
		if !e.pending {
			continue // a timeout notice that lost the race to the result
		}
		for _, env := range e.waiters {
			s.send(env, r.reply)
		}
		if r.final {
			e.waiters = nil
			s.cache.finish(r.job.identity, e, r.reply, now)
			delete(s.inflight, r.job)
		} else {
			s.inflight[r.job] = now // the waiters just heard of it
		}
	}
}

// marshalReply encodes a reply; it cannot fail for our types.
func marshalReply(r Reply) []byte {
	b, err := encodeJSON(r)
	if err != nil {
		b, _ = encodeJSON(Reply{ID: r.ID, Error: Errorf(CodeInternal, "encoding the reply: %v", err)})
	}
	return b
}

// encodeJSON is json.Marshal without HTML escaping, which would mangle
// CURVE keys and messages ("<" as \u003c) for no benefit here.
func encodeJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// clientName renders a ZeroMQ routing identity for logs: as text when it
// is printable (client-chosen), else in hex (libzmq-generated).
func clientName(identity string) string {
	for _, r := range identity {
		if !unicode.IsPrint(r) || r == unicode.ReplacementChar {
			return hex.EncodeToString([]byte(identity))
		}
	}
	return identity
}
