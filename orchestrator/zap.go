package orchestrator

import (
	"errors"
	"fmt"
	"strings"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// serveZAP answers one ZAP request (ZeroMQ RFC 27) from libzmq: a CURVE
// client is let in when its public key is allowed. The REP socket must
// answer every request, so malformed ones get status 500.
//
// Request frames: version, request id, domain, address, routing identity,
// mechanism, credentials...; reply frames: version, request id, status
// code, status text, user id, metadata.
func (s *Server) serveZAP() {
	for {
		msg, err := s.zap.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			return
		}
		if len(msg) < 6 {
			s.zap.SendMessage("1.0", "", "500", "malformed ZAP request", "", "")
			continue
		}
		version, reqID, address, mechanism := string(msg[0]), msg[1], string(msg[3]), string(msg[5])
		creds := msg[6:]
		if version != "1.0" {
			s.zap.SendMessage("1.0", reqID, "500", "unsupported ZAP version", "", "")
			continue
		}
		if mechanism != "CURVE" || len(creds) != 1 || len(creds[0]) != 32 {
			s.log.Warn("control connection refused: not CURVE", "address", address, "mechanism", mechanism)
			s.zap.SendMessage(version, reqID, "400", "CURVE required", "", "")
			continue
		}
		key := zmq.Z85encode(string(creds[0]))
		if !s.allowAny && !s.allowed[key] {
			if s.shouldLogRefusal(key) {
				s.log.Warn("control connection refused: client key not allowed", "address", address, "client_key", key)
			}
			s.zap.SendMessage(version, reqID, "400", "client key not allowed", "", "")
			continue
		}
		s.log.Debug("control connection accepted", "address", address, "client_key", key)
		s.zap.SendMessage(version, reqID, "200", "OK", key, "")
	}
}

// shouldLogRefusal rate-limits refusal logs to one a minute per client
// key: a refused client keeps reconnecting. Socket goroutine only.
func (s *Server) shouldLogRefusal(key string) bool {
	now := time.Now()
	if last, ok := s.refusals[key]; ok && now.Sub(last) < time.Minute {
		return false
	}
	if len(s.refusals) >= 1024 {
		clear(s.refusals)
	}
	s.refusals[key] = now
	return true
}

// z85Alphabet is ZeroMQ's Z85 alphabet (RFC 32).
const z85Alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

// checkKey checks that k is a Z85-encoded 32-byte CURVE key.
func checkKey(k string) error {
	if len(k) != 40 {
		return fmt.Errorf("CURVE key: want 40 Z85 characters, got %d", len(k))
	}
	for i := 0; i < len(k); i += 5 {
		var v uint64
		for _, c := range []byte(k[i : i+5]) {
			d := strings.IndexByte(z85Alphabet, c)
			if d < 0 {
				return fmt.Errorf("CURVE key: %q is not a Z85 character", c)
			}
			v = v*85 + uint64(d)
		}
		if v > 0xFFFFFFFF {
			return errors.New("CURVE key is not valid Z85")
		}
	}
	return nil
}
