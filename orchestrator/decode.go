package orchestrator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"
)

// parseRequest decodes and checks a request frame's top level. On error it
// still returns the request id when one could be read, so the error reply
// can carry it.
func parseRequest(body []byte, maxBytes int) (Request, *Error) {
	var req Request
	if len(body) > maxBytes {
		return req, Errorf(CodeBadRequest, "request is %d bytes; the limit is %d", len(body), maxBytes)
	}
	if !utf8.Valid(body) {
		return req, Errorf(CodeBadRequest, "request is not valid UTF-8 JSON")
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return req, Errorf(CodeBadRequest, "request is not a JSON object")
	}
	if err := decodeStrict(body, &req); err != nil {
		req.ID = salvageID(body)
		return req, describeDecodeError("", err)
	}
	switch {
	case req.ID == "":
		return req, Errorf(CodeBadRequest, "id: required (a non-empty string)")
	case len(req.ID) > MaxIDLen:
		id := req.ID
		req.ID = ""
		return req, Errorf(CodeBadRequest, "id: %d bytes, longer than %d (%.16q...)", len(id), MaxIDLen, id)
	case req.Cmd == "":
		return req, Errorf(CodeBadRequest, "cmd: required (one of %s)", strings.Join(Commands(), ", "))
	}
	return req, nil
}

// salvageID reads the id of a request that failed strict decoding, so that
// the error reply can still be matched by the client.
func salvageID(body []byte) string {
	var loose struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(body, &loose) != nil {
		return ""
	}
	if s, ok := loose.ID.(string); ok && len(s) <= MaxIDLen {
		return s
	}
	return ""
}

// decodeArgs decodes a command's args object into dst (a pointer to an
// args struct): unknown keys and mistyped values are errors, then the keys
// in required must be present and not null, and dst's validate (or
// Validate) method runs last.
func decodeArgs(raw json.RawMessage, dst any, required []string) *Error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = []byte("{}")
	}
	if raw[0] != '{' {
		return Errorf(CodeBadRequest, "args: want a JSON object")
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return describeDecodeError("args", err)
	}
	// unknown keys and mistyped values first: a misspelt key
	// ("max_bacth") is reported as such, not as the required key it
	// misses
	if err := decodeStrict(raw, dst); err != nil {
		return describeDecodeError("args", err)
	}
	for _, k := range required {
		if v, ok := keys[k]; !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return Errorf(CodeBadRequest, "args.%s: required", k)
		}
	}
	switch v := dst.(type) {
	case validator:
		return v.validate()
	case fieldValidator:
		if err := v.Validate(); err != nil {
			return Errorf(CodeBadRequest, "args.%v", err)
		}
	}
	return nil
}

// decodeStrict decodes exactly one JSON value into dst, refusing unknown
// object keys and trailing data.
func decodeStrict(data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errTrailing
	}
	return nil
}

var errTrailing = errors.New("trailing data after the JSON object")

// describeDecodeError turns an encoding/json error into a bad_request
// naming the offending field; prefix is "args" or "" (top level).
func describeDecodeError(prefix string, err error) *Error {
	path := func(field string) string {
		switch {
		case prefix == "":
			return field
		case field == "":
			return prefix
		default:
			return prefix + "." + field
		}
	}
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		name := path(te.Field)
		if name == "" {
			name = "request"
		}
		return Errorf(CodeBadRequest, "%s: want %s, got %s", name, describeType(te.Type), te.Value)
	case errors.As(err, &se):
		return Errorf(CodeBadRequest, "request is not valid JSON: %v (at byte %d)", se, se.Offset)
	case errors.Is(err, errTrailing):
		return Errorf(CodeBadRequest, "request: %v", err)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return Errorf(CodeBadRequest, "request is not valid JSON: unexpected end of input")
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		if prefix == "" {
			return Errorf(CodeBadRequest, "unknown field %s (a request has id, cmd and args)", f)
		}
		return Errorf(CodeBadRequest, "%s: unknown field %s", prefix, f)
	}
	return Errorf(CodeBadRequest, "%s: %s", path(""), strings.TrimPrefix(msg, "json: "))
}

// describeType names a Go type the way a JSON user thinks of it.
func describeType(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		if bits == 64 {
			return "an integer"
		}
		return fmt.Sprintf("an integer in %d..%d", int64(-1)<<(bits-1), int64(1)<<(bits-1)-1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		bits := t.Bits()
		if bits == 64 {
			return "a non-negative integer"
		}
		return fmt.Sprintf("an integer in 0..%d", uint64(1)<<bits-1)
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Pointer:
		return describeType(t.Elem())
	}
	return t.String()
}
