package onnx

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// field is one decoded protobuf field: its number and wire type, and its
// value (v for varint and fixed-width fields, b for length-delimited ones).
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

// eachField calls fn for every field of the message in b, in order. Groups
// (deprecated, never used by ONNX) are skipped.
func eachField(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("bad tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			f.v = uint64(v)
		case protowire.Fixed64Type:
			f.v, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

func (f field) want(t protowire.Type) error {
	if f.typ != t {
		return fmt.Errorf("field %d: wire type %d, want %d", f.num, f.typ, t)
	}
	return nil
}

// str returns a length-delimited field as a string.
func (f field) str() (string, error) {
	if err := f.want(protowire.BytesType); err != nil {
		return "", err
	}
	return string(f.b), nil
}

// bytes returns a length-delimited field.
func (f field) bytes() ([]byte, error) {
	if err := f.want(protowire.BytesType); err != nil {
		return nil, err
	}
	return f.b, nil
}

// int64 returns a varint field as a (two's complement) int64.
func (f field) int64() (int64, error) {
	if err := f.want(protowire.VarintType); err != nil {
		return 0, err
	}
	return int64(f.v), nil
}

// float32 returns a fixed32 field as a float.
func (f field) float32() (float32, error) {
	if err := f.want(protowire.Fixed32Type); err != nil {
		return 0, err
	}
	return math.Float32frombits(uint32(f.v)), nil
}

// appendVarints appends a repeated varint field, packed or not.
func (f field) appendVarints(dst []int64) ([]int64, error) {
	switch f.typ {
	case protowire.VarintType:
		return append(dst, int64(f.v)), nil
	case protowire.BytesType:
		b := f.b
		for len(b) > 0 {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, fmt.Errorf("field %d: packed varint: %w", f.num, protowire.ParseError(n))
			}
			dst = append(dst, int64(v))
			b = b[n:]
		}
		return dst, nil
	}
	return nil, fmt.Errorf("field %d: wire type %d for repeated varint", f.num, f.typ)
}

// appendFixed32 appends a repeated fixed32 field (float), packed or not.
func (f field) appendFixed32(dst []uint32) ([]uint32, error) {
	switch f.typ {
	case protowire.Fixed32Type:
		return append(dst, uint32(f.v)), nil
	case protowire.BytesType:
		if len(f.b)%4 != 0 {
			return nil, fmt.Errorf("field %d: packed fixed32 of %d bytes", f.num, len(f.b))
		}
		for b := f.b; len(b) > 0; b = b[4:] {
			v, _ := protowire.ConsumeFixed32(b)
			dst = append(dst, v)
		}
		return dst, nil
	}
	return nil, fmt.Errorf("field %d: wire type %d for repeated fixed32", f.num, f.typ)
}

// appendFixed64 appends a repeated fixed64 field (double), packed or not.
func (f field) appendFixed64(dst []uint64) ([]uint64, error) {
	switch f.typ {
	case protowire.Fixed64Type:
		return append(dst, f.v), nil
	case protowire.BytesType:
		if len(f.b)%8 != 0 {
			return nil, fmt.Errorf("field %d: packed fixed64 of %d bytes", f.num, len(f.b))
		}
		for b := f.b; len(b) > 0; b = b[8:] {
			v, _ := protowire.ConsumeFixed64(b)
			dst = append(dst, v)
		}
		return dst, nil
	}
	return nil, fmt.Errorf("field %d: wire type %d for repeated fixed64", f.num, f.typ)
}

// Encoding helpers: each appends one field to b.

func putString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func putStringNonEmpty(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return putString(b, num, s)
}

func putBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func putVarint(b []byte, num protowire.Number, v int64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

func putFloat(b []byte, num protowire.Number, v float32) []byte {
	b = protowire.AppendTag(b, num, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, math.Float32bits(v))
}

// putMessage appends a length-delimited sub-message built by fn.
func putMessage(b []byte, num protowire.Number, fn func(b []byte) []byte) []byte {
	return putBytes(b, num, fn(nil))
}

func putPackedVarints(b []byte, num protowire.Number, vs []int64) []byte {
	if len(vs) == 0 {
		return b
	}
	var p []byte
	for _, v := range vs {
		p = protowire.AppendVarint(p, uint64(v))
	}
	return putBytes(b, num, p)
}

func putPackedFloats(b []byte, num protowire.Number, vs []float32) []byte {
	if len(vs) == 0 {
		return b
	}
	p := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		p = protowire.AppendFixed32(p, math.Float32bits(v))
	}
	return putBytes(b, num, p)
}
