package conformance

// TextLine draws a deterministic synthetic line of "text" into a CHW
// float32 image of 3×h×w, normalized as PaddleOCR expects ((x/255-0.5)/0.5,
// so white is 1 and black -1): dark glyph-like strokes on a light,
// slightly textured background, with ascenders above a baseline so the
// image has an up and a down. flipped turns it by 180°.
func TextLine(h, w int, seed uint64, flipped bool) []float32 {
	img := make([]float32, 3*h*w)
	noise := Deterministic(h*w, seed)
	set := func(y, x int, v float32) {
		if y < 0 || y >= h || x < 0 || x >= w {
			return
		}
		if flipped {
			y, x = h-1-y, w-1-x
		}
		for c := 0; c < 3; c++ {
			img[c*h*w+y*w+x] = v
		}
	}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			set(y, x, 0.85+0.1*noise[y*w+x])
		}
	}
	// Glyphs: x-height body between mid and base, some with ascenders,
	// every one with a stroke width of about h/16.
	base, mid, top := h*3/4, h*2/5, h/8
	stroke := max(1, h/16)
	s := seed
	next := func(n int) int {
		s = s*6364136223846793005 + 1442695040888963407
		return int((s >> 33) % uint64(n))
	}
	for x0 := w / 24; x0 < w-w/24; {
		gw := h/4 + next(h/4)
		kind := next(4)
		dark := float32(-0.9) + 0.1*float32(next(3))
		for y := mid; y < base; y++ {
			for k := 0; k < stroke; k++ {
				set(y, x0+k, dark)
				if kind != 1 {
					set(y, x0+gw-1-k, dark)
				}
			}
		}
		for x := x0; x < x0+gw; x++ {
			for k := 0; k < stroke; k++ {
				set(mid+k, x, dark)
				if kind == 0 || kind == 3 {
					set(base-1-k, x, dark)
				}
			}
		}
		if kind >= 2 { // ascender
			for y := top; y < mid; y++ {
				for k := 0; k < stroke; k++ {
					set(y, x0+k, dark)
				}
			}
		}
		x0 += gw + h/8 + next(h/6)
		if next(7) == 0 {
			x0 += h / 3 // a word gap
		}
	}
	return img
}
