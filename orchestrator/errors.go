package orchestrator

import (
	"context"
	"errors"
	"fmt"
)

// Code classifies an error reply.
type Code string

// Error codes carried by error replies.
const (
	// CodeBadRequest: the request is malformed (not JSON, unknown or
	// mistyped field, missing or out-of-range argument, too large).
	CodeBadRequest Code = "bad_request"
	// CodeUnknownCommand: the cmd field names no command.
	CodeUnknownCommand Code = "unknown_command"
	// CodeNotFound: the named IF (or file) does not exist.
	CodeNotFound Code = "not_found"
	// CodeConflict: the request contradicts the current state (an IF of
	// that name or model id exists already, a request id was reused for a
	// different request, the appliance is draining).
	CodeConflict Code = "conflict"
	// CodeInvalidProfile: a profile could not be read or is invalid.
	CodeInvalidProfile Code = "invalid_profile"
	// CodeUnavailable: the command could not run now (queue full, timed
	// out, server shutting down); retrying later may succeed.
	CodeUnavailable Code = "unavailable"
	// CodeInternal: anything else; the appliance log has details.
	CodeInternal Code = "internal"
)

// Codes lists every error code, in documentation order.
func Codes() []Code {
	return []Code{CodeBadRequest, CodeUnknownCommand, CodeNotFound, CodeConflict,
		CodeInvalidProfile, CodeUnavailable, CodeInternal}
}

// Valid reports whether c is one of the documented codes.
func (c Code) Valid() bool {
	for _, k := range Codes() {
		if c == k {
			return true
		}
	}
	return false
}

// Error is a command error: the error member of an error reply. Handlers
// return it to choose the code; any other error becomes CodeInternal. The
// client library returns it for error replies.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// Error formats the error as "code: message".
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the *Error in err's chain, CodeInternal
// for any other non-nil error, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// toError turns a handler's error into the error member of a reply.
// timeout is the command's time limit, for the message.
func toError(err error, cmd string, timeout fmt.Stringer) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		if !e.Code.Valid() {
			return &Error{Code: CodeInternal, Message: fmt.Sprintf("%s (handler used unknown code %q)", e.Message, e.Code)}
		}
		return e
	case errors.Is(err, context.DeadlineExceeded):
		return Errorf(CodeUnavailable, "%s timed out after %s", cmd, timeout)
	case errors.Is(err, context.Canceled):
		return Errorf(CodeUnavailable, "%s canceled: control server shutting down", cmd)
	default:
		return &Error{Code: CodeInternal, Message: err.Error()}
	}
}
