// Package orchestrator is sluice's ZeroMQ control plane: a command server
// that a running appliance exposes, and the client library that tools/ifctl
// and tests use to talk to it.
//
// # Transport
//
// The server binds one ROUTER socket (github.com/pebbe/zmq4 over libzmq).
// The default endpoint is ipc:///run/sluice/control.sock, protected by the
// socket file's mode. tcp:// endpoints require CURVE encryption and client
// authentication unless ServerConfig.Insecure is set. Clients use DEALER
// sockets (REQ sockets work too: their empty delimiter frame is kept and
// echoed).
//
// # Wire format
//
// Every request and reply is one ZeroMQ frame holding one JSON object:
//
//	request: {"id": "r-1", "cmd": "resize", "args": {"name": "cls", "share": 0.4}}
//	reply:   {"id": "r-1", "ok": true, "data": {...}}
//	         {"id": "r-1", "ok": false, "error": {"code": "not_found", "message": "..."}}
//
// Requests are validated before the Handler sees them: non-JSON, unknown
// top-level or args fields, wrong types, missing required arguments, an
// empty id, unknown commands and oversized messages are answered with an
// error and change nothing. deploy's args are an ifmanager.Spec, the IF
// spec of a profile's [[if]] table (same keys, same Validate).
// docs/commands.md documents every command.
//
// # Idempotency
//
// The server remembers the replies to the most recent requests of each
// client (ZeroMQ routing identity) for a while. A request whose id was
// already seen from the same client gets the recorded reply again without
// running the command a second time; if the first one is still running, the
// duplicate gets its progress notices and is answered when it finishes. Reusing an id for a different
// request is a conflict.
//
// # Concurrency
//
// All ZeroMQ sockets of a Server belong to one goroutine. Commands run on
// other goroutines: mutating commands (everything except status) one at a
// time in arrival order, status concurrently with them. Each call gets a
// context that ends at the command's timeout or when the server stops.
// While a command is queued or running, its client gets a progress notice
// (a reply with Running set) every ServerConfig.ProgressInterval; Client
// waits as long as they come. When the server stops it waits for running
// calls at most ServerConfig.ShutdownTimeout, then abandons them: no
// handler can hold a shutdown.
//
// # Authentication
//
// CURVE client keys are checked by a ZAP (ZeroMQ RFC 27) handler that each
// Server runs inside its own ZeroMQ context. zmq4's AuthStart/AuthCurveAdd
// are deliberately not used: they keep process-global, unsynchronized state
// and a single handler per process, which would make two servers in one
// process (or a server and the tests) interfere.
package orchestrator
