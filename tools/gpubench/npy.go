package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// NumPy's .npy format, version 1.0, little-endian float32 only: what
// torchref.py loads with numpy.load.

// writeNpy writes v with the given shape as a float32 .npy file.
func writeNpy(path string, shape []int64, v []float32) error {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if n != int64(len(v)) {
		return fmt.Errorf("npy %s: shape %v holds %d values, got %d", path, shape, n, len(v))
	}
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.FormatInt(d, 10)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	hdr := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", tuple)
	// magic (6) + version (2) + header length (2) + header + '\n', padded
	// to a multiple of 64
	total := 10 + len(hdr) + 1
	pad := (64 - total%64) % 64
	hdr += strings.Repeat(" ", pad) + "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&b, binary.LittleEndian, uint16(len(hdr)))
	b.WriteString(hdr)
	buf := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	b.Write(buf)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("npy: %w", err)
	}
	return nil
}

var npyShape = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)

// readNpy reads a float32 .npy file written by writeNpy (or NumPy).
func readNpy(path string) (shape []int64, v []float32, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("npy: %w", err)
	}
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" || b[6] != 1 {
		return nil, nil, fmt.Errorf("npy %s: not a version 1 .npy file", path)
	}
	hl := int(binary.LittleEndian.Uint16(b[8:]))
	if 10+hl > len(b) {
		return nil, nil, fmt.Errorf("npy %s: truncated header", path)
	}
	hdr := string(b[10 : 10+hl])
	if !strings.Contains(hdr, "'descr': '<f4'") || strings.Contains(hdr, "'fortran_order': True") {
		return nil, nil, fmt.Errorf("npy %s: want little-endian float32 in C order, header %q", path, hdr)
	}
	m := npyShape.FindStringSubmatch(hdr)
	if m == nil {
		return nil, nil, fmt.Errorf("npy %s: no shape in %q", path, hdr)
	}
	n := int64(1)
	for _, f := range strings.Split(m[1], ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		d, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("npy %s: shape %q: %w", path, m[1], err)
		}
		shape = append(shape, d)
		n *= d
	}
	data := b[10+hl:]
	if int64(len(data)) != 4*n {
		return nil, nil, errors.New("npy " + path + ": data size does not match the shape")
	}
	v = make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return shape, v, nil
}
