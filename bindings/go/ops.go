package ampx

// #include <ampx/ampx.h>
import "C"

import "unsafe"

// Ops (section 11 of ampx.h). Each returns a new tensor on its inputs'
// context: borrowed from the innermost scope when one is open, else owned.
// Under an entered Autocast the op's precision class picks the compute
// dtype.

// Reduction reduces a loss over its elements.
type Reduction int32

// Loss reductions (ampx_reduction).
const (
	ReductionMean Reduction = C.AMPX_REDUCTION_MEAN
	ReductionSum  Reduction = C.AMPX_REDUCTION_SUM
	// ReductionNone keeps one F32 loss per row or element.
	ReductionNone Reduction = C.AMPX_REDUCTION_NONE
)

// Activation is fused into Linear.
type Activation int32

// Activations (ampx_activation).
const (
	ActivationNone Activation = C.AMPX_ACTIVATION_NONE
	ActivationReLU Activation = C.AMPX_ACTIVATION_RELU
	ActivationGELU Activation = C.AMPX_ACTIVATION_GELU
)

// op runs an op whose output lands in *out; first is any input (it gives
// the context), keep every input.
func op(first *Tensor, f func(out *C.ampx_tensor) C.ampx_status, keep ...any) (*Tensor, error) {
	var out C.ampx_tensor
	err := call(func() C.ampx_status { return f(&out) }, keep...)
	return first.context().result(out, err)
}

func binary(a, b *Tensor, f func(a, b C.ampx_tensor, out *C.ampx_tensor) C.ampx_status) (*Tensor, error) {
	ha, hb := a.handle(), b.handle()
	return op(a, func(out *C.ampx_tensor) C.ampx_status { return f(ha, hb, out) }, a, b)
}

func unary(x *Tensor, f func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status) (*Tensor, error) {
	h := x.handle()
	return op(x, func(out *C.ampx_tensor) C.ampx_status { return f(h, out) }, x)
}

// Add returns a + b; b may also be a row vector broadcast over a's rows.
func Add(a, b *Tensor) (*Tensor, error) {
	return binary(a, b, func(a, b C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_add(a, b, out) })
}

// Sub returns a - b (broadcasting as Add).
func Sub(a, b *Tensor) (*Tensor, error) {
	return binary(a, b, func(a, b C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_sub(a, b, out) })
}

// Mul returns a * b element-wise (broadcasting as Add).
func Mul(a, b *Tensor) (*Tensor, error) {
	return binary(a, b, func(a, b C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_mul(a, b, out) })
}

// Div returns a / b element-wise (IEEE division; b may be a row as in Add).
func Div(a, b *Tensor) (*Tensor, error) {
	return binary(a, b, func(a, b C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_div(a, b, out) })
}

// Matmul returns the matrix product with torch.matmul's shapes: [...,M,K]x[...,K,N]
// with batch dimensions that broadcast; a 1-D operand is one row (a) or one
// column (b), an extent the output drops.
func Matmul(a, b *Tensor) (*Tensor, error) {
	return binary(a, b, func(a, b C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_matmul(a, b, out) })
}

// Embedding returns the rows of weight [V, D] picked by indices (I32/I64).
func Embedding(weight, indices *Tensor) (*Tensor, error) {
	return binary(weight, indices, func(w, i C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_embedding(w, i, out)
	})
}

// Affine returns a*scale + shift in a's type.
func Affine(a *Tensor, scale, shift float64) (*Tensor, error) {
	return unary(a, func(a C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_affine(a, C.double(scale), C.double(shift), out)
	})
}

// ReLU returns max(x, 0).
func ReLU(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_relu(x, out) })
}

// GELU returns the erf form of GELU.
func GELU(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_gelu(x, out) })
}

// GELUTanh returns the tanh approximation of GELU.
func GELUTanh(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_gelu_tanh(x, out) })
}

// SiLU returns x * sigmoid(x).
func SiLU(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_silu(x, out) })
}

// Sigmoid returns 1 / (1 + exp(-x)).
func Sigmoid(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_sigmoid(x, out) })
}

// Tanh returns tanh(x).
func Tanh(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_tanh(x, out) })
}

// Exp returns e^x (fp32 class under autocast).
func Exp(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_exp(x, out) })
}

// Log returns the natural logarithm of x (fp32 class under autocast).
func Log(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_log(x, out) })
}

// Sqrt returns the square root of x.
func Sqrt(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_sqrt(x, out) })
}

// Rsqrt returns 1 / sqrt(x) (fp32 class under autocast).
func Rsqrt(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_rsqrt(x, out) })
}

// Sum returns the sum of all elements (one element, fp32 class).
func Sum(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_sum(x, out) })
}

// Mean returns the mean of all elements (one element of x's dtype, accumulated in fp32).
func Mean(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_mean(x, out) })
}

// Softmax returns the softmax over the last dimension.
func Softmax(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_softmax(x, out) })
}

// LogSoftmax returns the log-softmax over the last dimension.
func LogSoftmax(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status { return C.ampx_log_softmax(x, out) })
}

// CrossEntropy returns the cross-entropy of logits [N, C] against class
// labels [N]; labels equal to ignoreIndex are left out.
func CrossEntropy(logits, labels *Tensor, reduction Reduction, ignoreIndex int64) (*Tensor, error) {
	return binary(logits, labels, func(l, y C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_cross_entropy(l, y, C.ampx_reduction(reduction), C.int64_t(ignoreIndex), out)
	})
}

// CrossEntropyEx is CrossEntropy with class weights [C] (nil: none) and
// label smoothing in [0, 1], as torch's cross_entropy.
func CrossEntropyEx(logits, labels, weight *Tensor, reduction Reduction, ignoreIndex int64, labelSmoothing float64) (*Tensor, error) {
	hl, hy, hw := logits.handle(), labels.handle(), weight.handle()
	o := C.ampx_cross_entropy_options_default()
	o.reduction = C.ampx_reduction(reduction)
	o.ignore_index = C.int64_t(ignoreIndex)
	o.label_smoothing = C.double(labelSmoothing)
	return op(logits, func(out *C.ampx_tensor) C.ampx_status {
		return C.ampx_cross_entropy_ex(hl, hy, hw, &o, out)
	}, logits, labels, weight)
}

// MSELoss returns the mean-squared error (or the sum of squares) between
// input and target.
func MSELoss(input, target *Tensor, reduction Reduction) (*Tensor, error) {
	return binary(input, target, func(x, y C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_mse_loss(x, y, C.ampx_reduction(reduction), out)
	})
}

// BCEWithLogits returns the binary cross-entropy of logits against targets
// of the same shape.
func BCEWithLogits(logits, targets *Tensor, reduction Reduction) (*Tensor, error) {
	return binary(logits, targets, func(l, t C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_bce_with_logits(l, t, C.ampx_reduction(reduction), out)
	})
}

// BCEWithLogitsEx is BCEWithLogits with torch's weight and pos_weight
// (nil: none): element i's loss is -w_i [p_i t_i log sigmoid(x_i) + (1 - t_i)
// log(1 - sigmoid(x_i))]. weight rescales each element's loss, posWeight the
// positive term (a [C] posWeight applies along the last dimension of [..., C]
// logits). Each broadcasts to the logits' shape (aligned at the right,
// extents equal or 1), may be of any floating type, and is a constant (no
// gradient flows to it). The mean divides by the number of elements.
func BCEWithLogitsEx(logits, targets, weight, posWeight *Tensor, reduction Reduction) (*Tensor, error) {
	hl, ht, hw, hp := logits.handle(), targets.handle(), weight.handle(), posWeight.handle()
	o := C.ampx_bce_with_logits_options_default()
	o.reduction = C.ampx_reduction(reduction)
	return op(logits, func(out *C.ampx_tensor) C.ampx_status {
		return C.ampx_bce_with_logits_ex(hl, ht, hw, hp, &o, out)
	}, logits, targets, weight, posWeight)
}

// Linear returns act(x W^T + b) for x [..., in], weight [out, in] and bias
// [out] or nil.
func Linear(x, weight, bias *Tensor, activation Activation) (*Tensor, error) {
	hx, hw, hb := x.handle(), weight.handle(), bias.handle()
	return op(x, func(out *C.ampx_tensor) C.ampx_status {
		return C.ampx_linear(hx, hw, hb, C.ampx_activation(activation), out)
	}, x, weight, bias)
}

// LayerNorm normalises over the last dimension; weight and bias may be nil.
func LayerNorm(x, weight, bias *Tensor, eps float64) (*Tensor, error) {
	hx, hw, hb := x.handle(), weight.handle(), bias.handle()
	return op(x, func(out *C.ampx_tensor) C.ampx_status {
		return C.ampx_layer_norm(hx, hw, hb, C.double(eps), out)
	}, x, weight, bias)
}

// BatchNorm normalises x [N, C] or [N, C, L] per channel. weight, bias and
// the running statistics (both or neither) may be nil; in training the
// running statistics are updated in place.
func BatchNorm(x, weight, bias, runningMean, runningVar *Tensor, training bool, momentum, eps float64) (*Tensor, error) {
	hx, hw, hb, hm, hv := x.handle(), weight.handle(), bias.handle(), runningMean.handle(), runningVar.handle()
	return op(x, func(out *C.ampx_tensor) C.ampx_status {
		return C.ampx_batch_norm(hx, hw, hb, hm, hv, cbool(training), C.double(momentum), C.double(eps), out)
	}, x, weight, bias, runningMean, runningVar)
}

// Dropout zeroes each element with probability p while training and scales
// the others by 1/(1-p); the masks follow the context's seed.
func Dropout(x *Tensor, p float64, training bool) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_dropout(x, C.double(p), cbool(training), out)
	})
}

// AttentionOptions are the options of ScaledDotProductAttention; the zero
// value is the default (not causal, scale 1/sqrt(D), no dropout).
type AttentionOptions struct {
	Causal   bool    // query i attends to keys j <= i only (torch's is_causal)
	Scale    float64 // score scale; 0 selects 1/sqrt(head_dim)
	DropoutP float64 // probability of dropping each attention weight, in [0, 1)
}

// ScaledDotProductAttention computes softmax(scale q k^T + mask) v for q
// [B, H, Tq, D], k [B, Hkv, Tk, D] and v [B, Hkv, Tk, Dv], as torch's
// scaled_dot_product_attention: B may be any leading extents or none, Hkv
// divides H (grouped-query heads), mask (nil: none) broadcasts to
// [B, H, Tq, Tk] and is added (floating) or, I32/I64, marks with non-zero
// the keys that take part (torch's boolean mask).
func ScaledDotProductAttention(q, k, v, mask *Tensor, options AttentionOptions) (*Tensor, error) {
	hq, hk, hv, hm := q.handle(), k.handle(), v.handle(), mask.handle()
	o := C.ampx_attention_options_default()
	o.causal = cbool(options.Causal)
	o.scale = C.double(options.Scale)
	o.dropout_p = C.double(options.DropoutP)
	return op(q, func(out *C.ampx_tensor) C.ampx_status {
		return C.ampx_scaled_dot_product_attention(hq, hk, hv, hm, &o, out)
	}, q, k, v, mask)
}

// Conv2dOptions are the options of Conv2d, pairs as (rows, columns); zero
// fields select the defaults (stride 1, no padding, dilation 1, one group),
// negative ones are refused by the library.
type Conv2dOptions struct {
	Stride   [2]int64
	Padding  [2]int64
	Dilation [2]int64
	Groups   int64 // in_channels for a depthwise convolution
}

func orOne(v int64) C.int64_t {
	if v == 0 {
		return 1
	}
	return C.int64_t(v)
}

// Conv2d convolves x [N, C, H, W] (or [C, H, W]) with weight
// [O, C / groups, kh, kw] and bias [O] (nil: none), as
// torch.nn.functional.conv2d ("conv2d": lower precision).
func Conv2d(x, weight, bias *Tensor, options Conv2dOptions) (*Tensor, error) {
	hx, hw, hb := x.handle(), weight.handle(), bias.handle()
	o := C.ampx_conv2d_options_default()
	for d := 0; d < 2; d++ {
		o.stride[d] = orOne(options.Stride[d])
		o.padding[d] = C.int64_t(options.Padding[d])
		o.dilation[d] = orOne(options.Dilation[d])
	}
	o.groups = orOne(options.Groups)
	return op(x, func(out *C.ampx_tensor) C.ampx_status {
		return C.ampx_conv2d(hx, hw, hb, &o, out)
	}, x, weight, bias)
}

// Pool2dOptions are the options of MaxPool2d and AvgPool2d; the zero value
// is torch's default except ExcludePad: stride the kernel size, no padding,
// dilation 1, floor mode, padding counted in averages, no divisor override.
type Pool2dOptions struct {
	Stride          [2]int64 // {0, 0}: the kernel size
	Padding         [2]int64 // at most half the (dilated) kernel
	Dilation        [2]int64 // max pooling only; zero entries are 1
	CeilMode        bool
	ExcludePad      bool  // average only: padding does not count in the divisor
	DivisorOverride int64 // average only; 0: none
}

func poolOptions(options Pool2dOptions) C.ampx_pool2d_options {
	o := C.ampx_pool2d_options_default()
	for d := 0; d < 2; d++ {
		o.stride[d] = C.int64_t(options.Stride[d])
		o.padding[d] = C.int64_t(options.Padding[d])
		o.dilation[d] = orOne(options.Dilation[d])
	}
	o.ceil_mode = cbool(options.CeilMode)
	o.count_include_pad = cbool(!options.ExcludePad)
	o.divisor_override = C.int64_t(options.DivisorOverride)
	return o
}

// MaxPool2d takes each kernelH x kernelW window's maximum, as
// torch.nn.functional.max_pool2d ("max_pool2d": keep).
func MaxPool2d(x *Tensor, kernelH, kernelW int64, options Pool2dOptions) (*Tensor, error) {
	o := poolOptions(options)
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_max_pool2d(x, C.int64_t(kernelH), C.int64_t(kernelW), &o, out)
	})
}

// AvgPool2d averages each kernelH x kernelW window, as
// torch.nn.functional.avg_pool2d ("avg_pool2d": keep).
func AvgPool2d(x *Tensor, kernelH, kernelW int64, options Pool2dOptions) (*Tensor, error) {
	o := poolOptions(options)
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_avg_pool2d(x, C.int64_t(kernelH), C.int64_t(kernelW), &o, out)
	})
}

// GlobalAvgPool2d is each channel's mean over H and W, [N, C, 1, 1]
// (torch's adaptive_avg_pool2d(x, 1)).
func GlobalAvgPool2d(x *Tensor) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_global_avg_pool2d(x, out)
	})
}

// Reshape returns x's elements with a new shape (one extent may be -1),
// sharing x's memory.
func Reshape(x *Tensor, shape ...int64) (*Tensor, error) {
	ndim, dims := shapeArg(shape)
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_reshape(x, ndim, dims, out)
	})
}

// Transpose returns a copy of x with dimensions dim0 and dim1 exchanged
// (negative dims count from the end).
func Transpose(x *Tensor, dim0, dim1 int32) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_transpose(x, C.int32_t(dim0), C.int32_t(dim1), out)
	})
}

// Permute returns a contiguous copy with the dimensions reordered: output
// dimension k is dims[k] of x.
func Permute(x *Tensor, dims ...int32) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		var p *C.int32_t
		if len(dims) > 0 {
			p = (*C.int32_t)(unsafe.Pointer(&dims[0]))
		}
		return C.ampx_permute(x, C.int32_t(len(dims)), p, out)
	})
}

// SoftmaxDim returns the softmax over dimension dim.
func SoftmaxDim(x *Tensor, dim int32) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_softmax_dim(x, C.int32_t(dim), out)
	})
}

// LogSoftmaxDim returns the log-softmax over dimension dim.
func LogSoftmaxDim(x *Tensor, dim int32) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_log_softmax_dim(x, C.int32_t(dim), out)
	})
}

type reduceFunc func(C.ampx_tensor, *C.int32_t, C.int32_t, C.int32_t, *C.ampx_tensor) C.ampx_status

func reduceDims(x *Tensor, dims []int32, keepdim bool, f reduceFunc) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		var p *C.int32_t
		if len(dims) > 0 {
			p = (*C.int32_t)(unsafe.Pointer(&dims[0]))
		}
		return f(x, p, C.int32_t(len(dims)), cbool(keepdim), out)
	})
}

// SumDims returns the sum over dims (none: all) in x's dtype, as
// torch.sum(x, dims, keepdim).
func SumDims(x *Tensor, dims []int32, keepdim bool) (*Tensor, error) {
	return reduceDims(x, dims, keepdim, func(x C.ampx_tensor, d *C.int32_t, n, k C.int32_t, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_sum_dims(x, d, n, k, out)
	})
}

// MeanDims returns the mean over dims (none: all), as torch.mean(x, dims, keepdim).
func MeanDims(x *Tensor, dims []int32, keepdim bool) (*Tensor, error) {
	return reduceDims(x, dims, keepdim, func(x C.ampx_tensor, d *C.int32_t, n, k C.int32_t, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_mean_dims(x, d, n, k, out)
	})
}

// Amax returns the maximum over dims (none: all), as torch.amax(x, dims, keepdim).
func Amax(x *Tensor, dims []int32, keepdim bool) (*Tensor, error) {
	return reduceDims(x, dims, keepdim, func(x C.ampx_tensor, d *C.int32_t, n, k C.int32_t, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_amax(x, d, n, k, out)
	})
}

// RMSNorm normalises over the last dimension as torch's rms_norm; weight may be nil.
func RMSNorm(x, weight *Tensor, eps float64) (*Tensor, error) {
	hx, hw := x.handle(), weight.handle()
	return op(x, func(out *C.ampx_tensor) C.ampx_status {
		return C.ampx_rms_norm(hx, hw, C.double(eps), out)
	}, x, weight)
}

// MaskedFill returns x with value where mask (any dtype; non-zero is set)
// is set; the mask broadcasts to x's shape.
func MaskedFill(x, mask *Tensor, value float64) (*Tensor, error) {
	hx, hm := x.handle(), mask.handle()
	return op(x, func(out *C.ampx_tensor) C.ampx_status {
		return C.ampx_masked_fill(hx, hm, C.double(value), out)
	}, x, mask)
}

// Pow returns x^exponent element-wise.
func Pow(x *Tensor, exponent float64) (*Tensor, error) {
	return unary(x, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
		return C.ampx_pow(x, C.double(exponent), out)
	})
}

// RotaryEmbedding rotates the pairs of x [..., T, D] by the angles of the
// tables cos, sin [T, D/2] (rotate-half pairs, or (2i, 2i+1) when interleaved).
func RotaryEmbedding(x, cos, sin *Tensor, interleaved bool) (*Tensor, error) {
	hx, hc, hs := x.handle(), cos.handle(), sin.handle()
	return op(x, func(out *C.ampx_tensor) C.ampx_status {
		return C.ampx_rotary_embedding(hx, hc, hs, cbool(interleaved), out)
	}, x, cos, sin)
}

// Split cuts x along dim into pieces of the given sizes (torch.split), each
// a new contiguous tensor.
func Split(x *Tensor, dim int32, sizes ...int64) ([]*Tensor, error) {
	h := x.handle()
	outs := make([]C.ampx_tensor, len(sizes)+1)
	ptr, count := arrayArg(sizes)
	err := call(func() C.ampx_status {
		return C.ampx_split(h, (*C.int64_t)(unsafe.Pointer(ptr)), count, C.int32_t(dim), &outs[0])
	}, x, sizes)
	return x.context().results(outs[:len(sizes)], err)
}

// Chunk cuts x along dim into at most chunks pieces of ceil(extent/chunks)
// elements (torch.chunk).
func Chunk(x *Tensor, chunks, dim int32) ([]*Tensor, error) {
	h := x.handle()
	n := int(chunks)
	if n < 1 {
		n = 1
	}
	outs := make([]C.ampx_tensor, n)
	var count C.int32_t
	err := call(func() C.ampx_status {
		return C.ampx_chunk(h, C.int32_t(chunks), C.int32_t(dim), &outs[0], &count)
	}, x)
	return x.context().results(outs[:int(count)], err)
}

// Concat joins tensors along dim.
func Concat(dim int32, tensors ...*Tensor) (*Tensor, error) {
	ptr, count := arrayArg(handlesOf(tensors))
	var first *Tensor
	if len(tensors) > 0 {
		first = tensors[0]
	}
	return op(first, func(out *C.ampx_tensor) C.ampx_status {
		return C.ampx_concat(ptr, count, C.int32_t(dim), out)
	}, tensors)
}

// handlesOf lists the handles of ts (nil for a nil or closed tensor).
func handlesOf(ts []*Tensor) []C.ampx_tensor {
	handles := make([]C.ampx_tensor, len(ts))
	for i, t := range ts {
		handles[i] = t.handle()
	}
	return handles
}
