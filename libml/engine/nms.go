package engine

import (
	"cmp"
	"fmt"
	"slices"

	"sluice/libml/graph"
)

// NonMaxSuppression: for each batch and class, the boxes in order of
// falling score (ties to the lower index), those at or below
// score_threshold left out, each kept unless its IoU with one already
// kept exceeds iou_threshold, at most max_output_boxes_per_class of them;
// the output is int64 [selected, 3] of (batch, class, box), batch by
// batch, class by class, in order of selection. Its output's length
// depends on the scores, so the engine evaluates it at load only (a
// value-shaped operator, like NonZero: valueshape.go); a detector that
// suppresses at run time is served by ONNX Runtime where the profile
// allows the fallback.

// nmsBox is a box as two corners, lower corner first.
type nmsBox struct{ y1, x1, y2, x2 float64 }

// nmsCorners reads box i of boxes (flat, 4 values a box) in the node's
// format: corners in any order (center_point_box = 0) or centre and size
// (1).
func nmsCorners(b []float64, center bool) nmsBox {
	if center {
		xc, yc, w, h := b[0], b[1], b[2], b[3]
		return nmsBox{yc - h/2, xc - w/2, yc + h/2, xc + w/2}
	}
	return nmsBox{min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])}
}

// nmsOverlaps reports whether a and b's intersection over union exceeds
// threshold; a box of no area overlaps nothing.
func nmsOverlaps(a, b nmsBox, threshold float64) bool {
	areaA := (a.y2 - a.y1) * (a.x2 - a.x1)
	areaB := (b.y2 - b.y1) * (b.x2 - b.x1)
	if areaA <= 0 || areaB <= 0 {
		return false
	}
	h := min(a.y2, b.y2) - max(a.y1, b.y1)
	w := min(a.x2, b.x2) - max(a.x1, b.x1)
	if h <= 0 || w <= 0 {
		return false
	}
	inter := h * w
	return inter/(areaA+areaB-inter) > threshold
}

func refNonMaxSuppression(e *ev) ([]*Tensor, error) {
	boxes, scores := e.in(0), e.in(1)
	if boxes == nil || scores == nil {
		return nil, fmt.Errorf("boxes and scores are required")
	}
	if !boxes.known() || !scores.known() {
		return nil, &UnsupportedError{Op: e.n.Op, Node: e.n.Name, Why: "the engine evaluates it at load only, on constants " +
			"(its output's length depends on the scores); here its boxes or scores are computed at run time"}
	}
	bs, ss := boxes.Shape, scores.Shape
	if len(bs) != 3 || bs[2] != 4 || len(ss) != 3 || ss[0] != bs[0] || ss[2] != bs[1] {
		return nil, fmt.Errorf("boxes %v and scores %v: want [batches, boxes, 4] and [batches, classes, boxes]", bs, ss)
	}
	limit, err := e.scalarIn(2, "max_output_boxes_per_class", 0)
	if err != nil {
		return nil, err
	}
	iou, err := e.scalarIn(3, "iou_threshold", 0)
	if err != nil {
		return nil, err
	}
	if iou < 0 || iou > 1 {
		return nil, fmt.Errorf("iou_threshold %g outside [0, 1]", iou)
	}
	scoreMin, err := e.scalarIn(4, "score_threshold", 0)
	if err != nil {
		return nil, err
	}
	hasScoreMin := e.in(4) != nil
	center := e.n.AttrInt("center_point_box", 0)
	if center != 0 && center != 1 {
		return nil, fmt.Errorf("center_point_box %d, want 0 or 1", center)
	}
	nb, nc, n := bs[0], ss[1], bs[1]
	if err := checkFoldWork(e, float64(nb)*float64(nc)*float64(n)*(min(float64(n), max(limit, 0))+64)); err != nil {
		return nil, err
	}
	var sel []int64
	order := make([]int64, 0, n)
	var kept []nmsBox
	vals := make([]float64, 4)
	for b := int64(0); b < nb; b++ {
		for c := int64(0); c < nc; c++ {
			score := func(i int64) float64 { return scores.at((b*nc+c)*n + i) }
			order = order[:0]
			for i := int64(0); i < n; i++ {
				if !hasScoreMin || score(i) > scoreMin {
					order = append(order, i)
				}
			}
			slices.SortStableFunc(order, func(i, j int64) int { return cmp.Compare(score(j), score(i)) })
			kept = kept[:0]
			for _, i := range order {
				if int64(len(kept)) >= int64(limit) {
					break
				}
				for k := range vals {
					vals[k] = boxes.at((b*n+i)*4 + int64(k))
				}
				box := nmsCorners(vals, center == 1)
				suppressed := false
				for _, k := range kept {
					if nmsOverlaps(box, k, iou) {
						suppressed = true
						break
					}
				}
				if !suppressed {
					kept = append(kept, box)
					sel = append(sel, b, c, i)
				}
			}
		}
	}
	return one(&Tensor{DType: graph.Int64, Shape: []int64{int64(len(sel) / 3), 3}, I: sel})
}
