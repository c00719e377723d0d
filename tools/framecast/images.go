package main

import (
	"fmt"
	"image"
	"image/draw"
	_ "image/gif" // registers GIF with image.Decode
	_ "image/jpeg"
	_ "image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// imageExts are the file name extensions a directory of images is
// filtered by (case-insensitive).
var imageExts = []string{".png", ".jpg", ".jpeg", ".gif"}

// streamFrames returns the distinct frames a stream cycles through: its
// images, or synthetic frames of random bytes seeded by seed.
func streamFrames(s streamSpec, defaultFrames int, seed uint64) ([][]byte, error) {
	if s.Images != "" {
		return loadImages(s.Images, s.Height, s.Width, s.Frames)
	}
	n := s.Frames
	if n == 0 {
		n = defaultFrames
	}
	return syntheticFrames(n, s.Size, seed), nil
}

// syntheticFrames makes n frames of size random bytes.
func syntheticFrames(n, size int, seed uint64) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([][]byte, n)
	for i := range out {
		b := make([]byte, size)
		for k := 0; k < size; k += 8 {
			v := rng.Uint64()
			for j := k; j < min(k+8, size); j++ {
				b[j] = byte(v)
				v >>= 8
			}
		}
		out[i] = b
	}
	return out
}

// imageFiles lists the images at path: the file itself, or the directory's
// files with an image extension, sorted by name (not recursive).
func imageFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && slices.Contains(imageExts, strings.ToLower(filepath.Ext(e.Name()))) {
			out = append(out, filepath.Join(path, e.Name()))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("images %s: no %s files in the directory", path, strings.Join(imageExts, ", "))
	}
	return out, nil
}

// loadImages decodes the images at path (at most limit when limit > 0) and
// returns each as an h×w×3 uint8 frame in HWC RGB order.
func loadImages(path string, h, w, limit int) ([][]byte, error) {
	files, err := imageFiles(path)
	if err != nil {
		return nil, err
	}
	if limit > 0 && len(files) > limit {
		files = files[:limit]
	}
	out := make([][]byte, 0, len(files))
	for _, f := range files {
		frame, err := loadImage(f, h, w)
		if err != nil {
			return nil, err
		}
		out = append(out, frame)
	}
	return out, nil
}

// loadImage decodes one PNG, JPEG or GIF file (a GIF's first frame) and
// resizes it to h×w.
func loadImage(path string, h, w int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer f.Close()
	img, _, err := image.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("image %s: decode: %w", path, err)
	}
	if img.Bounds().Empty() {
		return nil, fmt.Errorf("image %s: empty", path)
	}
	return resizeBilinear(toRGBA(img), h, w), nil
}

// toRGBA converts any image to RGBA with its origin at (0, 0). RGBA holds
// premultiplied values, so transparent pixels come out composited over
// black.
func toRGBA(img image.Image) *image.RGBA {
	if m, ok := img.(*image.RGBA); ok && m.Rect.Min == (image.Point{}) {
		return m
	}
	b := img.Bounds()
	m := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(m, m.Rect, img, b.Min, draw.Src)
	return m
}

// tap is one output coordinate's two source neighbours and the weight of
// the second.
type tap struct {
	i0, i1 int
	f      float64
}

// bilinearTaps maps dst output coordinates onto src input ones, pixel
// centres aligned (the output pixel i covers the same fraction of the
// image as its source area), clamped at the edges.
func bilinearTaps(src, dst int) []tap {
	out := make([]tap, dst)
	scale := float64(src) / float64(dst)
	for i := range out {
		s := (float64(i)+0.5)*scale - 0.5
		s = max(0, min(s, float64(src-1)))
		i0 := int(math.Floor(s))
		out[i] = tap{i0: i0, i1: min(i0+1, src-1), f: s - float64(i0)}
	}
	return out
}

// resizeBilinear resamples src to h×w by bilinear interpolation and returns
// the pixels as HWC RGB bytes (alpha dropped). There is no low-pass filter:
// shrinking by more than 2× aliases, as most inference pipelines' resize
// does.
func resizeBilinear(src *image.RGBA, h, w int) []byte {
	sw, sh := src.Rect.Dx(), src.Rect.Dy()
	xs, ys := bilinearTaps(sw, w), bilinearTaps(sh, h)
	out := make([]byte, h*w*3)
	px := func(x, y, c int) float64 { return float64(src.Pix[y*src.Stride+x*4+c]) }
	o := 0
	for _, ty := range ys {
		for _, tx := range xs {
			for c := range 3 {
				top := px(tx.i0, ty.i0, c)*(1-tx.f) + px(tx.i1, ty.i0, c)*tx.f
				bot := px(tx.i0, ty.i1, c)*(1-tx.f) + px(tx.i1, ty.i1, c)*tx.f
				v := top*(1-ty.f) + bot*ty.f
				out[o] = uint8(max(0, min(255, math.Round(v))))
				o++
			}
		}
	}
	return out
}
