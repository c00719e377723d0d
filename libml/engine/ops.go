package engine

import (
	"sort"
)

// Op is a kernel operation. The numbering is the C engine's (enum sk_op in
// native/cpu/sluice_cpu.h); libml/cpu's tests check that they agree.
type Op int32

// Kernel operations.
const (
	OpNop        Op = 0
	OpGemm       Op = 1
	OpConv       Op = 2
	OpIm2col     Op = 3
	OpDWConv     Op = 4
	OpCol2im     Op = 5
	OpPool       Op = 6
	OpGPool      Op = 7
	OpUnary      Op = 8
	OpBinary     Op = 9
	OpChAffine   Op = 10
	OpSoftmax    Op = 11
	OpLayerNorm  Op = 12
	OpReduce     Op = 13
	OpCopy       Op = 14
	OpResize     Op = 15
	OpGather     Op = 16
	OpQuant      Op = 17
	OpQGemm      Op = 18
	OpGridSample Op = 19
	OpTopK       Op = 20
	OpRoiAlign   Op = 21
	OpDet        Op = 22
	OpCount      Op = 23
)

var opNames = [...]string{"nop", "gemm", "conv", "im2col", "dwconv", "col2im",
	"pool", "gpool", "unary", "binary", "chaffine", "softmax", "layernorm",
	"reduce", "copy", "resize", "gather", "quant", "qgemm", "gridsample", "topk", "roialign", "det"}

// String is the kernel operation's short name.
func (o Op) String() string {
	if o >= 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return "op?"
}

// Activation and unary codes (enum sk_act).
const (
	ActNone        = 0
	ActRelu        = 1
	ActClip        = 2
	ActSigmoid     = 3
	ActHardSigmoid = 4
	ActHardSwish   = 5
	ActTanh        = 6
	ActGelu        = 7
	ActGeluTanh    = 8
	ActLeakyRelu   = 9
	ActExp         = 10
	ActLog         = 11
	ActNeg         = 12
	ActAbs         = 13
	ActSqrt        = 14
	ActRecip       = 15
	ActErf         = 16
	ActFloor       = 17
	ActCeil        = 18
	ActPowC        = 19
	ActAffine      = 20
	ActSoftplus    = 21
	ActElu         = 22
	ActIdentity    = 23
	ActRound       = 24
	ActSin         = 25
	ActCos         = 26
	// ActF16 rounds to the nearest float16 (Cast to FLOAT16 at run time).
	ActF16   = 27
	ActSinh  = 28
	ActAsinh = 29
	ActAtanh = 30
	ActAsin  = 31
	ActAcos  = 32
	ActAtan  = 33
	ActSign  = 34
	// ActThreshRelu is x > a ? x : 0 (ThresholdedRelu); ActShrink
	// x < -a ? x + b : x > a ? x - b : 0 (Shrink's lambd, bias).
	ActThreshRelu = 35
	ActShrink     = 36
	ActCount      = 37
)

// Binary codes (enum sk_binop).
const (
	BinAdd   = 0
	BinSub   = 1
	BinMul   = 2
	BinDiv   = 3
	BinPow   = 4
	BinMax   = 5
	BinMin   = 6
	BinPRelu = 7
	// Comparisons give 1 or 0: a bool tensor's values.
	BinGreater   = 8
	BinLess      = 9
	BinEqual     = 10
	BinGreaterEq = 11
	BinLessEq    = 12
	// BinMod is C's fmod (ONNX Mod with fmod = 1, the dividend's sign).
	BinMod   = 13
	BinCount = 14
)

// Reduce codes (enum sk_reduce).
const (
	RedMean  = 0
	RedSum   = 1
	RedMax   = 2
	RedMin   = 3
	RedProd  = 4
	RedSumSq = 5
	RedL2    = 6
	RedCount = 7
)

// Kernel table sizes and shared slots (sluice_cpu.h).
const (
	MaxIn   = 8
	NumP    = 32
	NumF    = 8
	MaxRank = 6
	// PAct is the p slot of a fused activation; FActA and FActB its float
	// parameters.
	PAct  = 31
	FActA = 6
	FActB = 7
	// PStore is the p slot saying how a kernel's arena operands are
	// stored (see byteIntegers): 2 bits each, the output's in bits 0-1,
	// In[j]'s in bits 2+2j; StoreU8 and StoreS8 are bytes.
	PStore  = 30
	StoreU8 = 1
	StoreS8 = 2
	// FlagInPlace marks a kernel that reads and writes the same memory: it
	// is not idempotent on its own.
	FlagInPlace = 1
)

// unaryActs maps elementwise ONNX ops to their activation code.
var unaryActs = map[string]int{
	"Relu": ActRelu, "Sigmoid": ActSigmoid, "HardSigmoid": ActHardSigmoid,
	"HardSwish": ActHardSwish, "Tanh": ActTanh, "LeakyRelu": ActLeakyRelu,
	"Exp": ActExp, "Log": ActLog, "Neg": ActNeg, "Abs": ActAbs,
	"Sqrt": ActSqrt, "Reciprocal": ActRecip, "Erf": ActErf,
	"Floor": ActFloor, "Ceil": ActCeil, "Softplus": ActSoftplus,
	"Elu": ActElu, "Round": ActRound, "Sin": ActSin, "Cos": ActCos,
	"Clip": ActClip, "Gelu": ActGelu, opCastF16: ActF16,
	"Sinh": ActSinh, "Asinh": ActAsinh, "Atanh": ActAtanh, "Asin": ActAsin,
	"Acos": ActAcos, "Atan": ActAtan, "Sign": ActSign,
	"ThresholdedRelu": ActThreshRelu, "Shrink": ActShrink,
}

// opCastF16 is the engine's own name for a Cast to FLOAT16 at run time:
// an activation that rounds each value to the nearest float16
// (Model.lowerCastF16). It is no ONNX operator: a graph cannot name it.
const opCastF16 = "sluice#CastFloat16"

var binaryOps = map[string]int{
	"Add": BinAdd, "Sub": BinSub, "Mul": BinMul, "Div": BinDiv,
	"Pow": BinPow, "Max": BinMax, "Min": BinMin, "PRelu": BinPRelu,
}

// compareOps are the comparisons the engine runs on float32 tensors at
// run time (their bool results stored as 1 and 0).
var compareOps = map[string]int{
	"Greater": BinGreater, "Less": BinLess, "Equal": BinEqual,
	"GreaterOrEqual": BinGreaterEq, "LessOrEqual": BinLessEq,
}

// opSelect is the engine's own operator for an If on a run-time condition
// (Model.inlineIfBoth): Select(cond, a, b) is a where cond holds, else b,
// both of one shape. It is no ONNX operator: a graph cannot name it.
const opSelect = "sluice#Select"

var reduceOps = map[string]int{
	"ReduceMean": RedMean, "ReduceSum": RedSum, "ReduceMax": RedMax,
	"ReduceMin": RedMin, "ReduceProd": RedProd,
	"ReduceSumSquare": RedSumSq, "ReduceL2": RedL2,
}

// runtimeOps are the ONNX operators the engine runs on float32 tensors.
var runtimeOps = []string{
	"Abs", "Acos", "Add", "AffineGrid", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan", "Atanh", "AveragePool",
	"BatchNormalization", "Cast", "CastLike", "Ceil", "CenterCropPad", "Clip", "Compress", "Concat", "Conv", "ConvTranspose", "Cos",
	"CumSum", "DFT", "DepthToSpace", "Det", "Div", "Dropout", "Einsum",
	"Elu", "Erf", "Exp", "Expand", "Flatten", "Floor", "Gather", "GatherElements", "GatherND", "Gelu", "GridSample",
	"GRU", "Gemm", "GlobalAveragePool", "GlobalMaxPool", "HardSigmoid",
	"HardSwish", "Identity", "LSTM", "LayerNormalization", "LeakyRelu", "Log",
	"LogSoftmax", "MatMul", "Max", "MaxPool", "MaxUnpool", "Min", "Mod", "Mul", "Neg", "PRelu",
	"OneHot", "Pad", "Pow", "RNN", "Reciprocal", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin",
	"ReduceProd", "ReduceSum", "ReduceSumSquare", "Relu", "Reshape",
	"Resize", "ReverseSequence", "RoiAlign", "Round", "Scatter", "ScatterElements", "ScatterND", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Slice", "Softmax", "Softplus",
	"SpaceToDepth", "Split", "Sqrt", "STFT", "Squeeze", "Sub", "Sum", "Mean", "Tanh", "Tile", "TopK", "Transpose",
	"Trilu", "ThresholdedRelu", "Unsqueeze", "Upsample",
}

// foldOnlyOps are evaluated at load or compile time when their inputs are
// constants (shape arithmetic); they have no kernel.
var foldOnlyOps = []string{
	"And", "BitShift", "BlackmanWindow", "Constant", "ConstantOfShape", "Equal", "EyeLike", "Greater", "GreaterOrEqual",
	"HammingWindow", "HannWindow", "If", "IsInf", "IsNaN", "Less", "LessOrEqual", "Loop", "MelWeightMatrix", "NonMaxSuppression", "NonZero", "Not", "Or",
	"Range", "Scan", "Shape", "Size", "TfIdfVectorizer", "Unique", "Where", "Xor",
}

var supportedSet = func() map[string]bool {
	m := map[string]bool{}
	for _, o := range runtimeOps {
		m[o] = true
	}
	for _, o := range foldOnlyOps {
		m[o] = true
	}
	for _, o := range quantOps {
		m[o] = true
	}
	for o := range decomposedOps {
		m[o] = true
	}
	return m
}()

// SupportedOps is the sorted list of ONNX operators (default domain) the
// engine accepts. Those in foldOnlyOps must have constant inputs (after
// shapes are known).
func SupportedOps() []string {
	out := make([]string, 0, len(supportedSet))
	for o := range supportedSet {
		out = append(out, o)
	}
	sort.Strings(out)
	return out
}

// Supported reports whether op is accepted: an operator of the default
// domain by its name, one of another domain as "domain.Op" (nodeOp).
func Supported(op string) bool { return supportedSet[op] }
