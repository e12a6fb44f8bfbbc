using System;

namespace Ampx
{
    /// <summary>
    /// Higher-order gradients (ampx.h section 9): Grad is torch.autograd.grad;
    /// Tensor.Backward takes torch's retainGraph and createGraph, and
    /// Scaler.UnscaleTensor unscales the gradients of a scaled loss on the device
    /// (the gradient-penalty recipe).
    /// </summary>
    public static unsafe class Autograd
    {
        /// <summary>
        /// The gradients of `outputs` with respect to `inputs`, as
        /// torch.autograd.grad (ampx_grad): element i is the sum over k of
        /// d&lt;outputs[k], gradOutputs[k]&gt;/d inputs[i], a new tensor of
        /// inputs[i]'s shape and dtype (owned as an op output: borrowed from the
        /// innermost Scope when one is open), or null for an input no output
        /// reaches when `allowUnused` (without it, such an input throws
        /// AmpxException with Status.ErrInvalidArgument naming it).
        ///
        /// Inputs are leaves that require grad or tensors ops made (the gradient
        /// flowing into that tensor). `gradOutputs` is null, or one entry per
        /// output: a tensor of that output's shape and dtype, or null for ones,
        /// which only one-element outputs may take (a larger output without one
        /// throws with Status.ErrShape). `createGraph` records the computation of
        /// the gradients, so they can be differentiated again; `retainGraph`
        /// (null: the value of createGraph) keeps the records this call runs for
        /// another backward. Nothing accumulates into Tensor.Grad, and no
        /// grad-ready hook or data-parallel reduction runs. A failed call changes
        /// nothing.
        /// </summary>
        public static Tensor[] Grad(Tensor[] outputs, Tensor[] inputs, Tensor[] gradOutputs = null,
                                    bool? retainGraph = null, bool createGraph = false,
                                    bool allowUnused = false)
        {
            var outs = Tensor.Raw(outputs, "outputs");
            var ins = Tensor.Raw(inputs, "inputs");
            IntPtr[] seeds = null;
            if (gradOutputs != null)
            {
                if (gradOutputs.Length != outputs.Length)
                    throw new ArgumentException("gradOutputs has " + gradOutputs.Length + " entries for " +
                                                outputs.Length + " outputs; give one (or null) per output",
                                                "gradOutputs");
                seeds = new IntPtr[gradOutputs.Length];
                for (int i = 0; i < seeds.Length; ++i) seeds[i] = Tensor.RawOrNull(gradOutputs[i]);
            }
            var o = Native.ampx_grad_options_default();
            o.create_graph = createGraph ? 1 : 0;
            o.retain_graph = RetainFlag(retainGraph);
            o.allow_unused = allowUnused ? 1 : 0;
            var grads = new IntPtr[ins.Length];
            Native.ampx_status status;
            fixed (IntPtr* pout = outs)
            fixed (IntPtr* pin = ins)
            fixed (IntPtr* pseed = seeds)
            fixed (IntPtr* pgrad = grads)
                status = Native.ampx_grad(pout, (UIntPtr)outs.Length, pseed, pin, (UIntPtr)ins.Length, &o,
                                          pgrad);
            Err.Check(status, outputs, inputs, gradOutputs);
            var context = outputs[0].Context;
            var result = new Tensor[grads.Length];
            for (int i = 0; i < grads.Length; ++i)
                result[i] = grads[i] == IntPtr.Zero ? null : context.Adopt(grads[i]);
            return result;
        }

        /// <summary>
        /// Grad of one output with respect to one input (null when unused and
        /// `allowUnused`); a non-scalar output needs `gradOutput` of its shape.
        /// </summary>
        public static Tensor Grad(Tensor output, Tensor input, Tensor gradOutput = null,
                                  bool? retainGraph = null, bool createGraph = false,
                                  bool allowUnused = false)
        {
            if (output == null) throw new ArgumentNullException("output");
            if (input == null) throw new ArgumentNullException("input");
            return Grad(new[] { output }, new[] { input }, gradOutput == null ? null : new[] { gradOutput },
                        retainGraph, createGraph, allowUnused)[0];
        }

        // torch's retain_graph=None (follow create_graph) is -1 in C.
        internal static int RetainFlag(bool? retainGraph)
        {
            return retainGraph.HasValue ? (retainGraph.Value ? 1 : 0) : -1;
        }
    }
}
