package main

import (
	"bytes"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeImage encodes img into path with enc.
func writeImage(t *testing.T, path string, img image.Image, enc func(*os.File, image.Image) error) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := enc(f, img); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func pngEnc(f *os.File, m image.Image) error  { return png.Encode(f, m) }
func jpegEnc(f *os.File, m image.Image) error { return jpeg.Encode(f, m, &jpeg.Options{Quality: 95}) }
func gifEnc(f *os.File, m image.Image) error  { return gif.Encode(f, m, nil) }

// solid returns a w×h image of one colour.
func solid(w, h int, c color.Color) *image.NRGBA {
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			m.Set(x, y, c)
		}
	}
	return m
}

func TestResizeBilinear(t *testing.T) {
	// 2×1 black and white, stretched to 4×1: pixel centres at source
	// coordinates -0.25, 0.25, 0.75, 1.25 → 0, 0.25, 0.75, 1 of the way.
	src := image.NewRGBA(image.Rect(0, 0, 2, 1))
	src.Set(1, 0, color.RGBA{200, 100, 40, 255})
	got := resizeBilinear(src, 1, 4)
	want := []byte{0, 0, 0, 50, 25, 10, 150, 75, 30, 200, 100, 40}
	if !bytes.Equal(got, want) {
		t.Errorf("2x1 → 4x1: got %v, want %v", got, want)
	}
	// 4×4 → 2×2 averages each 2×2 block's centre (its four pixels).
	src = image.NewRGBA(image.Rect(0, 0, 4, 4))
	for y := range 4 {
		for x := range 4 {
			src.Set(x, y, color.RGBA{uint8(10 * (x + 4*y)), 0, 0, 255})
		}
	}
	got = resizeBilinear(src, 2, 2)
	for i, w := range []byte{25, 45, 105, 125} { // e.g. (0+10+40+50)/4
		if got[3*i] != w {
			t.Errorf("4x4 → 2x2 pixel %d: red %d, want %d", i, got[3*i], w)
		}
	}
	// Same size is the identity; HWC order.
	src = image.NewRGBA(image.Rect(0, 0, 3, 2))
	for i := range src.Pix {
		src.Pix[i] = byte(i*7 + 1)
		if i%4 == 3 {
			src.Pix[i] = 255
		}
	}
	got = resizeBilinear(src, 2, 3)
	for y := range 2 {
		for x := range 3 {
			for c := range 3 {
				if got[(y*3+x)*3+c] != src.Pix[y*src.Stride+x*4+c] {
					t.Fatalf("identity resize differs at (%d,%d,%d)", x, y, c)
				}
			}
		}
	}
}

func TestLoadImages(t *testing.T) {
	dir := t.TempDir()
	red := color.NRGBA{220, 20, 60, 255}
	writeImage(t, filepath.Join(dir, "a.png"), solid(40, 30, red), pngEnc)
	writeImage(t, filepath.Join(dir, "b.JPG"), solid(300, 200, color.NRGBA{10, 200, 30, 255}), jpegEnc)
	writeImage(t, filepath.Join(dir, "c.gif"), solid(7, 9, color.NRGBA{0, 0, 255, 255}), gifEnc)
	// Half-transparent white composites over black to mid grey.
	writeImage(t, filepath.Join(dir, "d.png"), solid(5, 5, color.NRGBA{255, 255, 255, 128}), pngEnc)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not an image"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub.png"), 0o755) // a directory is skipped

	frames, err := loadImages(dir, 16, 24, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 4 {
		t.Fatalf("%d frames, want 4 (png, jpeg, gif, png)", len(frames))
	}
	want := [][3]int{{220, 20, 60}, {10, 200, 30}, {0, 0, 255}, {128, 128, 128}}
	for i, f := range frames {
		if len(f) != 16*24*3 {
			t.Fatalf("frame %d: %d bytes, want %d", i, len(f), 16*24*3)
		}
		for p := 0; p < len(f); p += 3 {
			for c := range 3 {
				if d := int(f[p+c]) - want[i][c]; d < -3 || d > 3 { // JPEG is lossy
					t.Fatalf("frame %d byte %d: %d, want %d ± 3", i, p+c, f[p+c], want[i][c])
				}
			}
		}
	}
	if frames, err := loadImages(dir, 4, 4, 2); err != nil || len(frames) != 2 {
		t.Errorf("limit 2: %d frames, %v", len(frames), err)
	}
	one, err := loadImages(filepath.Join(dir, "a.png"), 224, 224, 0)
	if err != nil || len(one) != 1 || len(one[0]) != 150528 {
		t.Errorf("single file: %d frames, %v", len(one), err)
	}

	// Errors name the file.
	os.WriteFile(filepath.Join(dir, "e.png"), []byte("garbage"), 0o644)
	if _, err := loadImages(dir, 4, 4, 0); err == nil || !strings.Contains(err.Error(), "e.png: decode") {
		t.Errorf("corrupt file: %v", err)
	}
	empty := t.TempDir()
	if _, err := loadImages(empty, 4, 4, 0); err == nil || !strings.Contains(err.Error(), "no .png, .jpg, .jpeg, .gif files") {
		t.Errorf("empty dir: %v", err)
	}
	if _, err := loadImages(filepath.Join(dir, "nope.png"), 4, 4, 0); err == nil || !strings.Contains(err.Error(), "nope.png") {
		t.Errorf("missing file: %v", err)
	}
}

func TestSyntheticFrames(t *testing.T) {
	a, b := syntheticFrames(3, 1001, 5), syntheticFrames(3, 1001, 5)
	for i := range a {
		if len(a[i]) != 1001 || !bytes.Equal(a[i], b[i]) {
			t.Fatalf("frame %d: not reproducible", i)
		}
	}
	if bytes.Equal(a[0], a[1]) || bytes.Equal(a[0], syntheticFrames(1, 1001, 6)[0]) {
		t.Error("frames of different index or seed are equal")
	}
}
