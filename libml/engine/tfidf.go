package engine

import (
	"fmt"
	"strconv"
	"strings"

	"sluice/libml/graph"
)

// TfIdfVectorizer: counts of the pool's n-grams in each row of integer
// tokens, as term frequencies (TF), their weights where present (IDF) or
// both multiplied (TFIDF), weights[s] weighing output slot s as ONNX
// Runtime reads them. An n-gram of n tokens takes every (skip+1)-th
// token for skip = 0 .. max_skip_count; unigrams are counted once, at
// skip 0, as ONNX Runtime counts them. Its input is integer, and integer
// tensors are constants in the engine, so it is evaluated at load; a
// string pool (pool_strings) is refused, as the engine has no strings.

// tfidfPool is a node's n-gram pool: each n-gram's output slot by its
// tokens (tfidfKey).
type tfidfPool struct {
	slot           map[string]int64
	minN, maxN     int64
	maxSkip, width int64
	mode           string
	weights        []float32
}

// tfidfKey names an n-gram by its tokens.
func tfidfKey(tokens []int64) string {
	var b strings.Builder
	for i, t := range tokens {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(t, 10))
	}
	return b.String()
}

// tfidfPoolOf reads and checks n's attributes.
func tfidfPoolOf(n *graph.Node) (*tfidfPool, error) {
	if n.Attr("pool_strings") != nil {
		return nil, &UnsupportedError{Op: n.Op, Node: n.Name, Why: "a pool of strings: the engine has no string tensors (pool_int64s is supported)"}
	}
	p := &tfidfPool{
		minN: n.AttrInt("min_gram_length", 0), maxN: n.AttrInt("max_gram_length", 0),
		maxSkip: n.AttrInt("max_skip_count", 0), mode: n.AttrString("mode", ""),
		slot: map[string]int64{},
	}
	if p.minN < 1 || p.maxN < p.minN || p.maxSkip < 0 {
		return nil, fmt.Errorf("gram lengths %d..%d, max_skip_count %d", p.minN, p.maxN, p.maxSkip)
	}
	if p.mode != "TF" && p.mode != "IDF" && p.mode != "TFIDF" {
		return nil, fmt.Errorf("mode %q, want TF, IDF or TFIDF", p.mode)
	}
	pool, counts, indexes := n.AttrInts("pool_int64s", nil), n.AttrInts("ngram_counts", nil), n.AttrInts("ngram_indexes", nil)
	if len(counts) == 0 || counts[0] != 0 {
		return nil, fmt.Errorf("ngram_counts %v: want the offset of each n-gram length's n-grams in the pool, from 0", counts)
	}
	// counts[k] is where the (k+1)-grams start in the pool
	grams := int64(0)
	for k, start := range counts {
		end := int64(len(pool))
		if k+1 < len(counts) {
			end = counts[k+1]
		}
		size := int64(k + 1)
		if start > end || end > int64(len(pool)) || (end-start)%size != 0 {
			return nil, fmt.Errorf("ngram_counts %v for a pool of %d tokens", counts, len(pool))
		}
		for at := start; at < end; at += size {
			if grams >= int64(len(indexes)) {
				return nil, fmt.Errorf("ngram_indexes has %d entries, fewer than the pool's n-grams", len(indexes))
			}
			slot := indexes[grams]
			if slot < 0 {
				return nil, fmt.Errorf("ngram_indexes[%d] = %d", grams, slot)
			}
			p.slot[tfidfKey(pool[at:at+size])] = slot
			p.width = max(p.width, slot+1)
			grams++
		}
	}
	if grams != int64(len(indexes)) {
		return nil, fmt.Errorf("ngram_indexes has %d entries for %d n-grams", len(indexes), grams)
	}
	if a := n.Attr("weights"); a != nil {
		p.weights = a.Floats
		if int64(len(p.weights)) < p.width {
			return nil, fmt.Errorf("%d weights for %d output slots", len(p.weights), p.width)
		}
	}
	return p, nil
}

func refTfIdfVectorizer(e *ev) ([]*Tensor, error) {
	x, err := e.constIn(0, "X")
	if err != nil {
		return nil, err
	}
	if x == nil {
		return nil, fmt.Errorf("input X missing")
	}
	if x.IsFloat() {
		return nil, fmt.Errorf("X is %s, want int32 or int64 tokens", x.DType)
	}
	p, err := tfidfPoolOf(e.n)
	if err != nil {
		return nil, err
	}
	rows, cols := int64(1), int64(0)
	oshape := []int64{p.width}
	switch len(x.Shape) {
	case 1:
		cols = x.Shape[0]
	case 2:
		rows, cols = x.Shape[0], x.Shape[1]
		oshape = []int64{rows, p.width}
	default:
		return nil, fmt.Errorf("X of shape %v: want [C] or [N, C]", x.Shape)
	}
	if err := checkValueShaped(oshape, true); err != nil {
		return nil, err
	}
	// an n-gram never spans more than a row: longer ones and larger skips
	// count nothing (and must not cost a loop)
	maxN, maxSkip := min(p.maxN, max(cols, 1)), min(p.maxSkip, max(cols, 1))
	if err := checkFoldWork(e, float64(rows)*float64(cols)*float64(maxSkip+1)*float64(maxN)); err != nil {
		return nil, err
	}
	// weights[s] weighs output slot s, as ONNX Runtime reads them (the
	// same as the pool's order when ngram_indexes is 0, 1, ...)
	slotWeight := p.weights
	y := make([]float32, rows*p.width)
	gram := make([]int64, 0, maxN)
	for r := int64(0); r < rows; r++ {
		row := x.I[r*cols : (r+1)*cols]
		counts := y[r*p.width : (r+1)*p.width]
		for skip := int64(0); skip <= maxSkip; skip++ {
			for start := int64(0); start < cols; start++ {
				gram = gram[:0]
				for at, size := start, int64(1); size <= maxN && at < cols; at, size = at+skip+1, size+1 {
					gram = append(gram, row[at])
					if size < p.minN || (size == 1 && skip > 0) {
						continue
					}
					if slot, ok := p.slot[tfidfKey(gram)]; ok {
						counts[slot]++
					}
				}
			}
		}
		for s, c := range counts {
			switch {
			case p.mode == "IDF" && c > 0:
				counts[s] = 1
				if slotWeight != nil {
					counts[s] = slotWeight[s]
				}
			case p.mode == "TFIDF" && slotWeight != nil:
				counts[s] = c * slotWeight[s]
			}
		}
	}
	return one(NewFloat(oshape, y))
}
