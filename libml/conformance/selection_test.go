package conformance

import (
	"context"
	"fmt"
	"testing"

	"sluice/libml/engine"
	"sluice/libml/graph"
)

// NonMaxSuppression and TfIdfVectorizer (evaluated at load: their
// inputs are constants) and Det (a kernel) against ONNX Runtime, past the
// few cases of the node tests: overlapping boxes in both formats with
// ties in score, with and without a score threshold; every TfIdf mode
// with weights and a permuted output order; batches of matrices. The
// folded results feed a Mul with the run-time input, so both runtimes
// compute the same graph.
func TestSelectionORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	// foldedTimesX runs node n (output "sel", of shape shape by the
	// engine's evaluation) cast to float32 and multiplied by a run-time x
	// of shape [1, shape...] on both runtimes.
	foldedTimesX := func(name string, n graph.Node, inits []*graph.Tensor, opset int64, cast bool) error {
		ins := make([]*engine.Tensor, len(n.Inputs))
		for i, in := range n.Inputs {
			for _, c := range inits {
				if c.Name == in {
					v, err := engine.FromGraph(c)
					if err != nil {
						return err
					}
					ins[i] = v
				}
			}
		}
		outs, err := engine.Eval(&n, opset, ins)
		if err != nil {
			return fmt.Errorf("engine.Eval: %w", err)
		}
		dims := append([]int64{1}, outs[0].Shape...)
		nodes := []graph.Node{n}
		v := "sel"
		if cast {
			nodes = append(nodes, graph.Node{Name: "cast", Op: "Cast", Inputs: []string{"sel"}, Outputs: []string{"self"}, Attrs: []graph.Attr{aInt("to", int64(graph.Float32))}})
			v = "self"
		}
		nodes = append(nodes, graph.Node{Name: "mul", Op: "Mul", Inputs: []string{"x", v}, Outputs: []string{"y"}})
		g := &graph.Graph{Name: name, Opset: opset, Initializers: inits, Nodes: nodes,
			Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: dims}},
			Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: dims}}}
		x := ramp("x", dims, 7, 13, 1, -1) // 1 .. 13: no zero hides a value
		_, err = againstORT(ctx, ob, cb, name, g, x, ramp("y", dims, 0, 1, 1, 0))
		return err
	}

	// NonMaxSuppression: 2 batches of 30 boxes in clusters, 3 classes
	const nb, nboxes, ncls = 2, 30, 3
	corners, centers := make([]float32, nb*nboxes*4), make([]float32, nb*nboxes*4)
	for b := 0; b < nb; b++ {
		for i := 0; i < nboxes; i++ {
			cy := float32(i%5)*0.21 + float32((i*7+b)%5)*0.013
			cx := float32(i/5%3)*0.34 + float32((i*3+b)%7)*0.011
			h, w := 0.2+float32(i%4)*0.03, 0.25+float32(i%3)*0.04
			c := corners[(b*nboxes+i)*4:]
			if i%3 == 0 { // flipped corners
				c[0], c[1], c[2], c[3] = cy+h/2, cx+w/2, cy-h/2, cx-w/2
			} else {
				c[0], c[1], c[2], c[3] = cy-h/2, cx-w/2, cy+h/2, cx+w/2
			}
			z := centers[(b*nboxes+i)*4:]
			z[0], z[1], z[2], z[3] = cx, cy, w, h
		}
	}
	scores := make([]float32, nb*ncls*nboxes)
	for i := range scores {
		scores[i] = float32((i*37+11)%23) / 23 // ties
	}
	for _, c := range []struct {
		center   int64
		maxOut   int64
		iou      float32
		thr      float32
		noThresh bool
	}{
		{0, 100, 0.5, 0, true},
		{0, 5, 0.3, 0.4, false},
		{1, 100, 0.45, 0.2, false},
		{1, 7, 0.6, 0, true},
	} {
		name := fmt.Sprintf("nms-center%d-max%d-iou%g-thr%g", c.center, c.maxOut, c.iou, c.thr)
		boxes := corners
		if c.center == 1 {
			boxes = centers
		}
		inits := []*graph.Tensor{
			{Name: "boxes", DType: graph.Float32, Dims: []int64{nb, nboxes, 4}, F32: boxes},
			{Name: "scores", DType: graph.Float32, Dims: []int64{nb, ncls, nboxes}, F32: scores},
			i64Tensor("maxout", []int64{1}, c.maxOut), f32Vec("iou", c.iou), f32Vec("thr", c.thr),
		}
		ins := []string{"boxes", "scores", "maxout", "iou", "thr"}
		if c.noThresh {
			ins = ins[:4]
		}
		n := graph.Node{Name: "nms", Op: "NonMaxSuppression", Inputs: ins, Outputs: []string{"sel"},
			Attrs: []graph.Attr{aInt("center_point_box", c.center)}}
		if err := foldedTimesX(name, n, inits, 11, true); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// TfIdfVectorizer: unigrams, bigrams and trigrams of a pool, output
	// slots permuted, weights
	tokens := i64Tensor("tokens", []int64{2, 12}, 2, 3, 5, 4, 2, 3, 5, 7, 8, 2, 3, 4,
		5, 5, 4, 2, 3, 7, 7, 8, 2, 5, 4, 3)
	pool := []int64{2, 3, 5, 4, 7 /* unigrams */, 2, 3, 5, 4, 7, 8, 3, 5 /* bigrams */, 2, 3, 5 /* a trigram */}
	counts := []int64{0, 5, 13}
	idx := []int64{4, 0, 7, 2, 9, 1, 3, 5, 6, 8}
	weights := []float32{0.5, 1.5, 2, 0.25, 3, 1, 0.75, 1.25, 4, 0.1}
	for _, c := range []struct {
		mode             string
		minN, maxN, skip int64
		weighted         bool
	}{
		{"TF", 1, 3, 0, false},
		{"TF", 2, 3, 2, false},
		{"IDF", 1, 2, 1, false},
		{"IDF", 1, 3, 3, true},
		{"TFIDF", 1, 3, 2, true},
		{"TFIDF", 3, 3, 4, true},
	} {
		name := fmt.Sprintf("tfidf-%s-%d-%d-skip%d-w%v", c.mode, c.minN, c.maxN, c.skip, c.weighted)
		attrs := []graph.Attr{aStr("mode", c.mode), aInt("min_gram_length", c.minN), aInt("max_gram_length", c.maxN),
			aInt("max_skip_count", c.skip), aInts("pool_int64s", pool...), aInts("ngram_counts", counts...), aInts("ngram_indexes", idx...)}
		if c.weighted {
			attrs = append(attrs, graph.Attr{Name: "weights", Kind: graph.AttrFloats, Floats: weights})
		}
		n := graph.Node{Name: "tfidf", Op: "TfIdfVectorizer", Inputs: []string{"tokens"}, Outputs: []string{"sel"}, Attrs: attrs}
		if err := foldedTimesX(name, n, []*graph.Tensor{tokens}, 9, false); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Det of run-time matrices
	for _, m := range []int64{1, 3, 8} {
		name := fmt.Sprintf("det-%dx%d", m, m)
		g, want := oneNodeGraph(name, 11, graph.Node{Name: "det", Op: "Det", Inputs: []string{"x"}, Outputs: []string{"y"}},
			nil, []int64{1, 4, m, m}, []int64{1, 4})
		x := &graph.Tensor{Name: "x", DType: graph.Float32, Dims: []int64{1, 4, m, m}, F32: make([]float32, 4*m*m)}
		for i := range x.F32 {
			x.F32[i] = float32((i*i*13+i*5+7)%97)/16 - 3 // full rank
		}
		if _, err := againstORT(ctx, ob, cb, name, g, x, want); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
