using System;

namespace Ampx
{
    // The ops of ampx.h section 11 on tensors. Each returns a new tensor: borrowed
    // from the innermost Scope when one is open (see Context.Scope), else owned.
    // Under an entered Autocast the op's class picks its compute dtype.
    public sealed unsafe partial class Tensor
    {
        private Tensor Output(Native.ampx_status status, IntPtr result, object keep1 = null,
                              object keep2 = null, object keep3 = null)
        {
            Err.Check(status, this, keep1, keep2, keep3);
            return Context.Adopt(result);
        }

        private static Tensor NotNull(Tensor tensor, string name)
        {
            if (tensor == null) throw new ArgumentNullException(name);
            return tensor;
        }

        // ---- element-wise -------------------------------------------------

        /// <summary>a + b with broadcasting ("add": promote).</summary>
        public Tensor Add(Tensor other)
        {
            IntPtr r;
            return Output(Native.ampx_add(Ptr, NotNull(other, "other").Ptr, &r), r, other);
        }

        /// <summary>a - b with broadcasting.</summary>
        public Tensor Sub(Tensor other)
        {
            IntPtr r;
            return Output(Native.ampx_sub(Ptr, NotNull(other, "other").Ptr, &r), r, other);
        }

        /// <summary>a * b with broadcasting.</summary>
        public Tensor Mul(Tensor other)
        {
            IntPtr r;
            return Output(Native.ampx_mul(Ptr, NotNull(other, "other").Ptr, &r), r, other);
        }

        /// <summary>a / b with broadcasting (IEEE division).</summary>
        public Tensor Div(Tensor other)
        {
            IntPtr r;
            return Output(Native.ampx_div(Ptr, NotNull(other, "other").Ptr, &r), r, other);
        }

        public static Tensor operator +(Tensor a, Tensor b) { return NotNull(a, "a").Add(b); }
        public static Tensor operator -(Tensor a, Tensor b) { return NotNull(a, "a").Sub(b); }
        public static Tensor operator *(Tensor a, Tensor b) { return NotNull(a, "a").Mul(b); }
        public static Tensor operator /(Tensor a, Tensor b) { return NotNull(a, "a").Div(b); }

        /// <summary>this * scale + shift, element-wise, in this tensor's dtype.</summary>
        public Tensor Affine(double scale, double shift)
        {
            IntPtr r;
            return Output(Native.ampx_affine(Ptr, scale, shift, &r), r);
        }

        public Tensor Relu() { IntPtr r; return Output(Native.ampx_relu(Ptr, &r), r); }
        /// <summary>GELU, the erf form.</summary>
        public Tensor Gelu() { IntPtr r; return Output(Native.ampx_gelu(Ptr, &r), r); }
        /// <summary>GELU, the tanh approximation.</summary>
        public Tensor GeluTanh() { IntPtr r; return Output(Native.ampx_gelu_tanh(Ptr, &r), r); }
        public Tensor Silu() { IntPtr r; return Output(Native.ampx_silu(Ptr, &r), r); }
        public Tensor Sigmoid() { IntPtr r; return Output(Native.ampx_sigmoid(Ptr, &r), r); }
        public Tensor Tanh() { IntPtr r; return Output(Native.ampx_tanh(Ptr, &r), r); }
        public Tensor Exp() { IntPtr r; return Output(Native.ampx_exp(Ptr, &r), r); }
        public Tensor Log() { IntPtr r; return Output(Native.ampx_log(Ptr, &r), r); }
        public Tensor Sqrt() { IntPtr r; return Output(Native.ampx_sqrt(Ptr, &r), r); }
        public Tensor Rsqrt() { IntPtr r; return Output(Native.ampx_rsqrt(Ptr, &r), r); }

        /// <summary>this ^ exponent element-wise ("pow": fp32).</summary>
        public Tensor Pow(double exponent)
        {
            IntPtr r;
            return Output(Native.ampx_pow(Ptr, exponent, &r), r);
        }

        /// <summary>`value` where `mask` (broadcast to this shape) is non-zero.</summary>
        public Tensor MaskedFill(Tensor mask, double value)
        {
            IntPtr r;
            return Output(Native.ampx_masked_fill(Ptr, NotNull(mask, "mask").Ptr, value, &r), r, mask);
        }

        /// <summary>Inverted dropout with probability p while training.</summary>
        public Tensor Dropout(double p, bool training = true)
        {
            IntPtr r;
            return Output(Native.ampx_dropout(Ptr, p, training ? 1 : 0, &r), r);
        }

        // ---- reductions ---------------------------------------------------

        /// <summary>Sum of all elements (one-element F32 tensor).</summary>
        public Tensor Sum() { IntPtr r; return Output(Native.ampx_sum(Ptr, &r), r); }

        /// <summary>Mean of all elements, in this tensor's dtype.</summary>
        public Tensor Mean() { IntPtr r; return Output(Native.ampx_mean(Ptr, &r), r); }

        /// <summary>Sum over `dims` (none: all), keeping them at extent 1 when keepdim.</summary>
        public Tensor Sum(int[] dims, bool keepdim = false)
        {
            dims = dims ?? new int[0];
            IntPtr r;
            fixed (int* d = dims)
                return Output(Native.ampx_sum_dims(Ptr, d, dims.Length, keepdim ? 1 : 0, &r), r);
        }

        /// <summary>Mean over `dims` (none: all).</summary>
        public Tensor Mean(int[] dims, bool keepdim = false)
        {
            dims = dims ?? new int[0];
            IntPtr r;
            fixed (int* d = dims)
                return Output(Native.ampx_mean_dims(Ptr, d, dims.Length, keepdim ? 1 : 0, &r), r);
        }

        /// <summary>Maximum over `dims` (none: all).</summary>
        public Tensor Amax(int[] dims, bool keepdim = false)
        {
            dims = dims ?? new int[0];
            IntPtr r;
            fixed (int* d = dims)
                return Output(Native.ampx_amax(Ptr, d, dims.Length, keepdim ? 1 : 0, &r), r);
        }

        /// <summary>Softmax over the last dimension.</summary>
        public Tensor Softmax() { IntPtr r; return Output(Native.ampx_softmax(Ptr, &r), r); }

        /// <summary>Log-softmax over the last dimension.</summary>
        public Tensor LogSoftmax() { IntPtr r; return Output(Native.ampx_log_softmax(Ptr, &r), r); }

        /// <summary>Softmax over dimension `dim` (negative from the end).</summary>
        public Tensor Softmax(int dim) { IntPtr r; return Output(Native.ampx_softmax_dim(Ptr, dim, &r), r); }

        /// <summary>Log-softmax over dimension `dim`.</summary>
        public Tensor LogSoftmax(int dim)
        {
            IntPtr r;
            return Output(Native.ampx_log_softmax_dim(Ptr, dim, &r), r);
        }

        // ---- shapes -------------------------------------------------------

        /// <summary>The elements with another shape (one extent may be -1); shares memory.</summary>
        public Tensor Reshape(params long[] shape)
        {
            shape = shape ?? new long[0];
            IntPtr r;
            fixed (long* s = shape)
                return Output(Native.ampx_reshape(Ptr, shape.Length, s, &r), r);
        }

        /// <summary>Dimensions dim0 and dim1 exchanged (a copy).</summary>
        public Tensor Transpose(int dim0, int dim1)
        {
            IntPtr r;
            return Output(Native.ampx_transpose(Ptr, dim0, dim1, &r), r);
        }

        /// <summary>Dimensions reordered: output dimension k is dims[k] (a copy).</summary>
        public Tensor Permute(params int[] dims)
        {
            dims = dims ?? new int[0];
            IntPtr r;
            fixed (int* d = dims)
                return Output(Native.ampx_permute(Ptr, dims.Length, d, &r), r);
        }

        /// <summary>Pieces of `sizes` elements along `dim`.</summary>
        public Tensor[] Split(long[] sizes, int dim)
        {
            if (sizes == null) throw new ArgumentNullException("sizes");
            var raw = Ptr;
            var outs = new IntPtr[sizes.Length];
            Native.ampx_status status;
            fixed (long* s = sizes)
            fixed (IntPtr* o = outs)
                status = Native.ampx_split(raw, s, (UIntPtr)sizes.Length, dim, o);
            Err.Check(status, this);
            var result = new Tensor[outs.Length];
            for (int i = 0; i < outs.Length; ++i) result[i] = Context.Adopt(outs[i]);
            return result;
        }

        /// <summary>At most `chunks` pieces along `dim`, as torch.chunk.</summary>
        public Tensor[] Chunk(int chunks, int dim)
        {
            var raw = Ptr;
            var outs = new IntPtr[Math.Max(chunks, 0)];
            int count;
            Native.ampx_status status;
            fixed (IntPtr* o = outs)
                status = Native.ampx_chunk(raw, chunks, dim, o, &count);
            Err.Check(status, this);
            var result = new Tensor[count];
            for (int i = 0; i < count; ++i) result[i] = Context.Adopt(outs[i]);
            return result;
        }

        /// <summary>Joins `tensors` along `dim`.</summary>
        public static Tensor Concat(Tensor[] tensors, int dim)
        {
            var raw = Raw(tensors, "tensors");
            if (raw.Length == 0) throw new ArgumentException("Concat of no tensor", "tensors");
            IntPtr r;
            Native.ampx_status status;
            fixed (IntPtr* t = raw)
                status = Native.ampx_concat(t, (UIntPtr)raw.Length, dim, &r);
            Err.Check(status, tensors);
            return tensors[0].Context.Adopt(r);
        }

        // ---- layers -------------------------------------------------------

        /// <summary>Matrix product with torch.matmul's shapes.</summary>
        public Tensor Matmul(Tensor other)
        {
            IntPtr r;
            return Output(Native.ampx_matmul(Ptr, NotNull(other, "other").Ptr, &r), r, other);
        }

        /// <summary>act(x W^T + b): x [..., in], weight [out, in], bias [out] or null.</summary>
        public static Tensor Linear(Tensor x, Tensor weight, Tensor bias = null,
                                    Activation activation = Activation.None)
        {
            NotNull(x, "x");
            IntPtr r;
            return x.Output(Native.ampx_linear(x.Ptr, NotNull(weight, "weight").Ptr, RawOrNull(bias),
                                               (Native.ampx_activation)activation, &r), r, weight, bias);
        }

        /// <summary>Layer normalisation over the last dimension; weight and bias may be null.</summary>
        public static Tensor LayerNorm(Tensor x, Tensor weight, Tensor bias, double eps = 1e-5)
        {
            NotNull(x, "x");
            IntPtr r;
            return x.Output(Native.ampx_layer_norm(x.Ptr, RawOrNull(weight), RawOrNull(bias), eps, &r), r,
                            weight, bias);
        }

        /// <summary>RMS normalisation over the last dimension; weight may be null.</summary>
        public static Tensor RmsNorm(Tensor x, Tensor weight, double eps = 1e-6)
        {
            NotNull(x, "x");
            IntPtr r;
            return x.Output(Native.ampx_rms_norm(x.Ptr, RawOrNull(weight), eps, &r), r, weight);
        }

        /// <summary>Batch normalisation per channel of x [N, C, ...]; statistics F32 [C] or null.</summary>
        public static Tensor BatchNorm(Tensor x, Tensor weight, Tensor bias, Tensor runningMean,
                                       Tensor runningVar, bool training, double momentum = 0.1,
                                       double eps = 1e-5)
        {
            NotNull(x, "x");
            IntPtr r;
            var status = Native.ampx_batch_norm(x.Ptr, RawOrNull(weight), RawOrNull(bias), RawOrNull(runningMean),
                                                RawOrNull(runningVar), training ? 1 : 0, momentum, eps, &r);
            Err.KeepAlive(runningMean, runningVar);
            return x.Output(status, r, weight, bias);
        }

        /// <summary>Rows of `weight` [V, D] picked by `indices` (I32/I64).</summary>
        public static Tensor Embedding(Tensor weight, Tensor indices)
        {
            NotNull(weight, "weight");
            IntPtr r;
            return weight.Output(Native.ampx_embedding(weight.Ptr, NotNull(indices, "indices").Ptr, &r), r,
                                 indices);
        }

        /// <summary>Rotary position embeddings of x [..., T, D] with tables [T, D / 2].</summary>
        public static Tensor RotaryEmbedding(Tensor x, Tensor cos, Tensor sin, bool interleaved = false)
        {
            NotNull(x, "x");
            IntPtr r;
            return x.Output(Native.ampx_rotary_embedding(x.Ptr, NotNull(cos, "cos").Ptr, NotNull(sin, "sin").Ptr,
                                                         interleaved ? 1 : 0, &r), r, cos, sin);
        }

        /// <summary>Scaled dot-product attention of q, k, v with an optional mask.</summary>
        public static Tensor ScaledDotProductAttention(Tensor q, Tensor k, Tensor v, Tensor mask = null,
                                                       AttentionOptions options = null)
        {
            NotNull(q, "q");
            var o = (options ?? new AttentionOptions()).ToNative();
            IntPtr r;
            var status = Native.ampx_scaled_dot_product_attention(q.Ptr, NotNull(k, "k").Ptr, NotNull(v, "v").Ptr,
                                                                  RawOrNull(mask), &o, &r);
            return q.Output(status, r, k, v, mask);
        }

        /// <summary>2-D convolution of x [N, C, H, W] by weight [O, C / groups, kh, kw].</summary>
        public static Tensor Conv2d(Tensor x, Tensor weight, Tensor bias = null, Conv2dOptions options = null)
        {
            NotNull(x, "x");
            var o = (options ?? new Conv2dOptions()).ToNative();
            IntPtr r;
            return x.Output(Native.ampx_conv2d(x.Ptr, NotNull(weight, "weight").Ptr, RawOrNull(bias), &o, &r), r,
                            weight, bias);
        }

        /// <summary>Max pooling over kernelH x kernelW windows.</summary>
        public Tensor MaxPool2d(long kernelH, long kernelW, Pool2dOptions options = null)
        {
            var o = (options ?? new Pool2dOptions()).ToNative();
            IntPtr r;
            return Output(Native.ampx_max_pool2d(Ptr, kernelH, kernelW, &o, &r), r);
        }

        /// <summary>Average pooling over kernelH x kernelW windows.</summary>
        public Tensor AvgPool2d(long kernelH, long kernelW, Pool2dOptions options = null)
        {
            var o = (options ?? new Pool2dOptions()).ToNative();
            IntPtr r;
            return Output(Native.ampx_avg_pool2d(Ptr, kernelH, kernelW, &o, &r), r);
        }

        /// <summary>The mean of each channel over H and W.</summary>
        public Tensor GlobalAvgPool2d() { IntPtr r; return Output(Native.ampx_global_avg_pool2d(Ptr, &r), r); }

        // ---- losses -------------------------------------------------------

        /// <summary>Mean-squared error ("mse_loss": fp32).</summary>
        public static Tensor MseLoss(Tensor input, Tensor target, Reduction reduction = Reduction.Mean)
        {
            NotNull(input, "input");
            IntPtr r;
            return input.Output(Native.ampx_mse_loss(input.Ptr, NotNull(target, "target").Ptr,
                                                     (Native.ampx_reduction)reduction, &r), r, target);
        }

        /// <summary>Cross-entropy of logits [N, C] against class labels [N].</summary>
        public static Tensor CrossEntropy(Tensor logits, Tensor labels, Reduction reduction = Reduction.Mean,
                                          long ignoreIndex = -100)
        {
            NotNull(logits, "logits");
            IntPtr r;
            return logits.Output(Native.ampx_cross_entropy(logits.Ptr, NotNull(labels, "labels").Ptr,
                                                           (Native.ampx_reduction)reduction, ignoreIndex, &r),
                                 r, labels);
        }

        /// <summary>Cross-entropy with class weights (null: none) and label smoothing.</summary>
        public static Tensor CrossEntropy(Tensor logits, Tensor labels, Tensor weight, CrossEntropyOptions options)
        {
            NotNull(logits, "logits");
            var o = (options ?? new CrossEntropyOptions()).ToNative();
            IntPtr r;
            return logits.Output(Native.ampx_cross_entropy_ex(logits.Ptr, NotNull(labels, "labels").Ptr,
                                                              RawOrNull(weight), &o, &r), r, labels, weight);
        }

        /// <summary>
        /// Binary cross-entropy of logits against targets of the same shape, as
        /// torch's binary_cross_entropy_with_logits. `weight` (null: none) rescales
        /// each element's loss and `posWeight` (null: none) the positive term
        /// (torch's per-class weight: a [C] tensor applies along the last dimension
        /// of [..., C] logits); each broadcasts to the logits' shape (aligned at the
        /// right, extents equal or 1), may be of any floating type, and is a
        /// constant (no gradient flows to it). The mean divides by the number of
        /// elements, whatever the weights.
        /// </summary>
        public static Tensor BceWithLogits(Tensor logits, Tensor targets, Reduction reduction = Reduction.Mean,
                                           Tensor weight = null, Tensor posWeight = null)
        {
            NotNull(logits, "logits");
            IntPtr r;
            if (weight == null && posWeight == null)
                return logits.Output(Native.ampx_bce_with_logits(logits.Ptr, NotNull(targets, "targets").Ptr,
                                                                 (Native.ampx_reduction)reduction, &r), r, targets);
            var o = Native.ampx_bce_with_logits_options_default();
            o.reduction = (Native.ampx_reduction)reduction;
            return logits.Output(Native.ampx_bce_with_logits_ex(logits.Ptr, NotNull(targets, "targets").Ptr,
                                                                RawOrNull(weight), RawOrNull(posWeight), &o, &r),
                                 r, targets, weight, posWeight);
        }
    }
}
