package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// ClientConfig configures a Client. Zero fields take the defaults named.
type ClientConfig struct {
	// CurveServerKey is the server's CURVE public key (Z85); setting it
	// turns CURVE on. Required for tcp:// unless Insecure.
	CurveServerKey string
	// CurvePublicKey and CurveSecretKey are the client's key pair (Z85);
	// the server must list the public key. Both empty with CURVE on: a
	// fresh pair is generated, which only servers allowing "*" accept.
	CurvePublicKey string
	CurveSecretKey string
	// Insecure allows tcp:// without CURVE.
	Insecure bool
	// Timeout bounds the wait of a call whose context has no deadline for
	// hearing from the server (default 10s): the reply, or a progress
	// notice (Reply.Running) for a command still queued or running, after
	// which the call waits another Timeout. Such a call waits as long as
	// the server works on the command.
	Timeout time.Duration
	// Identity is the ZeroMQ routing identity (default: random). The
	// server de-duplicates retried request ids per identity, so a fixed
	// identity lets a new connection retry safely. Two live clients must
	// not share one.
	Identity string
}

// Client is a control-plane client over one DEALER socket. Its methods are
// safe for concurrent use; calls are serialized. Client implements Handler,
// so code can drive a remote appliance like a local one.
type Client struct {
	cfg      ClientConfig
	endpoint string
	idPrefix string
	seq      atomic.Uint64

	mu     sync.Mutex // guards everything below
	zctx   *zmq.Context
	sock   *zmq.Socket
	mon    *zmq.Socket
	poller *zmq.Poller
	// handshakeErr is the last failed handshake, reported when a call
	// gets no reply.
	handshakeErr *HandshakeError
}

var _ Handler = (*Client)(nil)

// HandshakeError reports that a connection to the server failed its
// security handshake: with Auth true the server refused the client's key.
type HandshakeError struct {
	Endpoint string
	Auth     bool
	// Detail is libzmq's status code (ZAP status for Auth) or protocol
	// error code.
	Detail int
}

// Error describes the failed handshake.
func (e *HandshakeError) Error() string {
	if e.Auth {
		return fmt.Sprintf("%s refused the connection (ZAP status %d): client key not allowed", e.Endpoint, e.Detail)
	}
	return fmt.Sprintf("security handshake with %s failed (code %#x): wrong server key, or CURVE on one side only", e.Endpoint, e.Detail)
}

// Dial connects a client to endpoint (ipc:// or tcp://). ZeroMQ connects
// in the background: Dial does not wait for the server, calls do.
func Dial(endpoint string, cfg ClientConfig) (*Client, error) {
	scheme, _, ok := strings.Cut(endpoint, "://")
	if !ok || (scheme != "ipc" && scheme != "tcp") {
		return nil, fmt.Errorf("orchestrator: endpoint %q: want ipc://PATH or tcp://HOST:PORT", endpoint)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.CurveServerKey == "" {
		if cfg.CurvePublicKey != "" || cfg.CurveSecretKey != "" {
			return nil, errors.New("orchestrator: client CURVE keys need CurveServerKey")
		}
		if scheme == "tcp" && !cfg.Insecure {
			return nil, fmt.Errorf("orchestrator: endpoint %s: tcp needs CURVE (CurveServerKey) unless Insecure is set", endpoint)
		}
	} else {
		if err := checkKey(cfg.CurveServerKey); err != nil {
			return nil, fmt.Errorf("orchestrator: CurveServerKey: %w", err)
		}
		switch {
		case cfg.CurvePublicKey == "" && cfg.CurveSecretKey == "":
			pub, sec, err := zmq.NewCurveKeypair()
			if err != nil {
				return nil, fmt.Errorf("orchestrator: generating a client key pair: %w", err)
			}
			cfg.CurvePublicKey, cfg.CurveSecretKey = pub, sec
		case cfg.CurvePublicKey == "" || cfg.CurveSecretKey == "":
			return nil, errors.New("orchestrator: give both CurvePublicKey and CurveSecretKey, or neither")
		}
		if err := checkKey(cfg.CurveSecretKey); err != nil {
			return nil, fmt.Errorf("orchestrator: CurveSecretKey: %w", err)
		}
		if pub, err := zmq.AuthCurvePublic(cfg.CurveSecretKey); err != nil || pub != cfg.CurvePublicKey {
			return nil, errors.New("orchestrator: CurvePublicKey does not belong to CurveSecretKey")
		}
	}
	if cfg.Identity == "" {
		cfg.Identity = "ctl-" + randomHex(8)
	}
	c := &Client{cfg: cfg, endpoint: endpoint, idPrefix: randomHex(4)}
	if err := c.open(); err != nil {
		c.closeLocked()
		return nil, err
	}
	return c, nil
}

func (c *Client) open() error {
	var err error
	if c.zctx, err = zmq.NewContext(); err != nil {
		return fmt.Errorf("orchestrator: zmq context: %w", err)
	}
	if c.sock, err = c.zctx.NewSocket(zmq.DEALER); err != nil {
		return fmt.Errorf("orchestrator: zmq socket: %w", err)
	}
	s := c.sock
	if err := s.SetLinger(0); err != nil {
		return fmt.Errorf("orchestrator: ZMQ_LINGER: %w", err)
	}
	if err := s.SetIdentity(c.cfg.Identity); err != nil {
		return fmt.Errorf("orchestrator: routing identity %q: %w", c.cfg.Identity, err)
	}
	if c.cfg.CurveServerKey != "" {
		if err := s.ClientAuthCurve(c.cfg.CurveServerKey, c.cfg.CurvePublicKey, c.cfg.CurveSecretKey); err != nil {
			return fmt.Errorf("orchestrator: CURVE client setup: %w", err)
		}
	}
	// Watch handshakes so that a refused key is reported as such instead
	// of as a timeout.
	const monAddr = "inproc://sluice-client-monitor"
	events := zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH |
		zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
	if err := s.Monitor(monAddr, events); err != nil {
		return fmt.Errorf("orchestrator: socket monitor: %w", err)
	}
	if c.mon, err = c.zctx.NewSocket(zmq.PAIR); err != nil {
		return fmt.Errorf("orchestrator: zmq socket: %w", err)
	}
	if err := c.mon.SetLinger(0); err != nil {
		return fmt.Errorf("orchestrator: ZMQ_LINGER: %w", err)
	}
	if err := c.mon.Connect(monAddr); err != nil {
		return fmt.Errorf("orchestrator: socket monitor: %w", err)
	}
	if err := s.Connect(c.endpoint); err != nil {
		return fmt.Errorf("orchestrator: connecting to %s: %w", c.endpoint, err)
	}
	c.poller = zmq.NewPoller()
	c.poller.Add(c.sock, zmq.POLLIN)
	c.poller.Add(c.mon, zmq.POLLIN)
	return nil
}

// Endpoint returns the endpoint the client connects to.
func (c *Client) Endpoint() string { return c.endpoint }

// PublicKey returns the client's CURVE public key ("" without CURVE).
func (c *Client) PublicKey() string { return c.cfg.CurvePublicKey }

// Close closes the connection. Calls after Close fail.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeLocked()
}

func (c *Client) closeLocked() error {
	if c.sock != nil {
		c.sock.Close()
		c.sock = nil
	}
	if c.mon != nil {
		c.mon.Close()
		c.mon = nil
	}
	var err error
	if c.zctx != nil {
		err = c.zctx.Term()
		c.zctx = nil
	}
	return err
}

// NewRequestID returns a fresh request id, unique to this client.
func (c *Client) NewRequestID() string {
	return fmt.Sprintf("%s-%d", c.idPrefix, c.seq.Add(1))
}

// Call sends cmd with args (any JSON-encodable value; nil for none) and
// waits for the reply. An error reply is returned as *Error; on success
// the reply's data is decoded into data unless data is nil.
func (c *Client) Call(ctx context.Context, cmd string, args, data any) error {
	req, err := NewRequest(c.NewRequestID(), cmd, args)
	if err != nil {
		return err
	}
	rep, _, err := c.Do(ctx, req)
	if err != nil {
		return err
	}
	return rep.Decode(data)
}

// NewRequest builds a request, encoding args.
func NewRequest(id, cmd string, args any) (Request, error) {
	req := Request{ID: id, Cmd: cmd}
	if args != nil {
		raw, err := json.Marshal(args)
		if err != nil {
			return req, fmt.Errorf("orchestrator: encoding %s args: %w", cmd, err)
		}
		req.Args = raw
	}
	return req, nil
}

// Decode returns the reply's error as *Error, or decodes its data into
// data (when data is not nil).
func (r *Reply) Decode(data any) error {
	if !r.OK {
		if r.Error == nil {
			return Errorf(CodeInternal, "error reply without an error member")
		}
		return r.Error
	}
	if data == nil || len(r.Data) == 0 {
		return nil
	}
	if err := json.Unmarshal(r.Data, data); err != nil {
		return fmt.Errorf("orchestrator: decoding reply %s data: %w", r.ID, err)
	}
	return nil
}

// Do sends req (a fresh id is filled in when req.ID is empty) and waits
// for the reply with the same id. With a deadline in ctx it waits until
// then; without one, until it has heard nothing from the server for the
// client's Timeout: progress notices (Reply.Running) of a command still
// queued or running restart that wait, so Do waits as long as the server
// works on the command. When the wait ends after a progress notice, Do
// returns that notice (CodeUnavailable, Running set; a retry with the same
// id gets the final reply). It returns the decoded reply and its raw
// bytes; an error reply is not an error of Do. Replies to earlier calls
// that gave up waiting are skipped.
func (c *Client) Do(ctx context.Context, req Request) (Reply, []byte, error) {
	if req.ID == "" {
		req.ID = c.NewRequestID()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Reply{}, nil, fmt.Errorf("orchestrator: encoding request: %w", err)
	}
	// Without a deadline, the wait is for hearing from the server: quiet
	// is pushed back by each progress notice.
	_, hasDeadline := ctx.Deadline()
	quiet := time.Now().Add(c.cfg.Timeout)
	var progress Reply
	var progressRaw []byte
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sock == nil {
		return Reply{}, nil, errors.New("orchestrator: client is closed")
	}
	sent := false
	for {
		if !sent {
			// DEALER refuses to queue while it has no connection (between
			// reconnects): keep trying until the deadline.
			_, err := c.sock.SendBytes(body, zmq.DONTWAIT)
			switch {
			case err == nil:
				sent = true
				c.poller.Update(0, zmq.POLLIN)
			case zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN):
				c.poller.Update(0, zmq.POLLIN|zmq.POLLOUT)
			default:
				return Reply{}, nil, fmt.Errorf("orchestrator: sending %s to %s: %w", req.Cmd, c.endpoint, err)
			}
		}
		if !hasDeadline && !time.Now().Before(quiet) {
			return c.giveUp(req, sent, progress, progressRaw, context.DeadlineExceeded)
		}
		if err := ctx.Err(); err != nil {
			return c.giveUp(req, sent, progress, progressRaw, err)
		}
		wait := 100 * time.Millisecond
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, max(time.Until(dl), time.Millisecond))
		}
		if !hasDeadline {
			wait = min(wait, max(time.Until(quiet), time.Millisecond))
		}
		polled, err := c.poller.Poll(wait)
		if err != nil {
			return Reply{}, nil, fmt.Errorf("orchestrator: poll: %w", err)
		}
		for _, p := range polled {
			if p.Socket == c.mon {
				if herr := c.readEvents(); herr != nil && herr.Auth {
					return Reply{}, nil, fmt.Errorf("orchestrator: %s: %w", req.Cmd, herr)
				}
				continue
			}
			if p.Events&zmq.POLLIN == 0 {
				continue // writable: the send is retried above
			}
			rep, raw, ok, err := c.readReply(req.ID)
			if err != nil {
				return Reply{}, nil, err
			}
			if ok && rep.Running {
				progress, progressRaw = rep, raw
				quiet = time.Now().Add(c.cfg.Timeout)
				continue
			}
			if ok {
				return rep, raw, nil
			}
		}
	}
}

// giveUp ends a call that got no final reply: with the last progress
// notice as its reply when there was one, else with an error.
func (c *Client) giveUp(req Request, sent bool, progress Reply, progressRaw []byte, cause error) (Reply, []byte, error) {
	if progressRaw != nil {
		return progress, progressRaw, nil
	}
	what := "no reply"
	if !sent {
		what = "not connected"
	}
	err := fmt.Errorf("orchestrator: %s (id %s) to %s: %s: %w", req.Cmd, req.ID, c.endpoint, what, cause)
	if c.handshakeErr != nil {
		return Reply{}, nil, fmt.Errorf("%w (%w)", err, c.handshakeErr)
	}
	return Reply{}, nil, err
}

// readReply reads the waiting replies and returns the one for id, if any.
func (c *Client) readReply(id string) (Reply, []byte, bool, error) {
	for {
		frames, err := c.sock.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			if zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN) {
				return Reply{}, nil, false, nil
			}
			return Reply{}, nil, false, fmt.Errorf("orchestrator: receiving from %s: %w", c.endpoint, err)
		}
		raw := frames[len(frames)-1]
		var rep Reply
		if err := json.Unmarshal(raw, &rep); err != nil {
			return Reply{}, nil, false, fmt.Errorf("orchestrator: reply from %s is not a valid reply: %w", c.endpoint, err)
		}
		if rep.ID == id {
			return rep, raw, true, nil
		}
		// A late reply to a call that gave up: skip it.
	}
}

// readEvents consumes monitor events and returns the last handshake
// failure seen, if any.
func (c *Client) readEvents() *HandshakeError {
	for {
		ev, _, val, err := c.mon.RecvEvent(zmq.DONTWAIT)
		if err != nil {
			return c.handshakeErr
		}
		switch ev {
		case zmq.EVENT_HANDSHAKE_SUCCEEDED:
			c.handshakeErr = nil
		case zmq.EVENT_HANDSHAKE_FAILED_AUTH:
			c.handshakeErr = &HandshakeError{Endpoint: c.endpoint, Auth: true, Detail: val}
		case zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
			c.handshakeErr = &HandshakeError{Endpoint: c.endpoint, Detail: val}
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Deploy calls deploy on the server.
func (c *Client) Deploy(ctx context.Context, args DeployArgs) (IFStatus, error) {
	var r IFStatus
	return r, c.Call(ctx, CmdDeploy, args, &r)
}

// Remove calls remove on the server.
func (c *Client) Remove(ctx context.Context, args RemoveArgs) error {
	return c.Call(ctx, CmdRemove, args, nil)
}

// Resize calls resize on the server.
func (c *Client) Resize(ctx context.Context, args ResizeArgs) (IFStatus, error) {
	var r IFStatus
	return r, c.Call(ctx, CmdResize, args, &r)
}

// Swap calls swap on the server.
func (c *Client) Swap(ctx context.Context, args SwapArgs) (SwapResult, error) {
	var r SwapResult
	return r, c.Call(ctx, CmdSwap, args, &r)
}

// SetBatch calls set-batch on the server.
func (c *Client) SetBatch(ctx context.Context, args SetBatchArgs) (IFStatus, error) {
	var r IFStatus
	return r, c.Call(ctx, CmdSetBatch, args, &r)
}

// ReloadProfile calls reload-profile on the server.
func (c *Client) ReloadProfile(ctx context.Context, args ReloadArgs) (ReloadResult, error) {
	var r ReloadResult
	return r, c.Call(ctx, CmdReloadProfile, args, &r)
}

// Status calls status on the server.
func (c *Client) Status(ctx context.Context, args StatusArgs) (StatusReply, error) {
	var r StatusReply
	return r, c.Call(ctx, CmdStatus, args, &r)
}

// Plan calls plan on the server.
func (c *Client) Plan(ctx context.Context, args PlanArgs) (PlanReply, error) {
	var r PlanReply
	return r, c.Call(ctx, CmdPlan, args, &r)
}

// Resume calls resume on the server: admission starts again after a drain.
func (c *Client) Resume(ctx context.Context, args ResumeArgs) (ResumeResult, error) {
	var r ResumeResult
	return r, c.Call(ctx, CmdResume, args, &r)
}

// Drain calls drain on the server. Without a deadline in ctx, the call
// waits for the drain's own timeout plus a margin.
func (c *Client) Drain(ctx context.Context, args DrainArgs) (DrainResult, error) {
	var r DrainResult
	if _, ok := ctx.Deadline(); !ok && args.TimeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(c.cfg.Timeout, time.Duration(args.TimeoutMS)*time.Millisecond+10*time.Second))
		defer cancel()
	}
	return r, c.Call(ctx, CmdDrain, args, &r)
}
