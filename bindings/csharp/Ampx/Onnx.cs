using System;
using System.Collections.Generic;

namespace Ampx
{
    /// <summary>Options of Onnx.Export (ampx_onnx_options); the defaults are the
    /// header's: opset 17, IR 8, static shapes, F32 weights.</summary>
    public sealed class OnnxOptions
    {
        /// <summary>ai.onnx opset, 9 to 23; 0: 17.</summary>
        public int Opset;
        /// <summary>IR version; 0: 8 (or the opset's, if newer).</summary>
        public int IrVersion;
        /// <summary>null: static shapes; else the name of dim 0 of every input and output.</summary>
        public string BatchDim;
        /// <summary>FLOAT16 initializers, each followed by a Cast to FLOAT (half the bytes).</summary>
        public bool F16Weights;
        /// <summary>Native.ampx_onnx_external_data; 0: beyond 2 GiB only.</summary>
        public int ExternalData;
        /// <summary>Extra outputs holding these tensors' values (ML-Agents' version_number).</summary>
        public IList<KeyValuePair<string, Tensor>> Constants;
    }

    /// <summary>
    /// ONNX export (ampx.h section 19): a forward pass recorded on the tape, written as
    /// an ONNX model for ONNX Runtime (godot_rl_agents) and Unity's Inference Engine.
    /// </summary>
    public static unsafe class Onnx
    {
        /// <summary>
        /// Writes the recorded computation of `outputs` from `inputs` (graph name, tensor
        /// pairs) to `path`. Record the forward with grad mode on and each input requiring
        /// grad; export before Backward. The file is replaced atomically; on an error none
        /// is left.
        /// </summary>
        public static void Export(string path, IList<KeyValuePair<string, Tensor>> inputs,
                                  IList<KeyValuePair<string, Tensor>> outputs,
                                  OnnxOptions options = null)
        {
            if (path == null) throw new ArgumentNullException("path");
            if (inputs == null) throw new ArgumentNullException("inputs");
            if (outputs == null) throw new ArgumentNullException("outputs");
            options = options ?? new OnnxOptions();
            var constants = options.Constants ?? new List<KeyValuePair<string, Tensor>>();
            var inTensors = Split(inputs, out var inNames);
            var outTensors = Split(outputs, out var outNames);
            var constTensors = Split(constants, out var constNames);
            var inRaw = Tensor.Raw(inTensors, "inputs");
            var outRaw = Tensor.Raw(outTensors, "outputs");
            var constRaw = Tensor.Raw(constTensors, "constants");
            using (var ni = new SafetensorsFile.NativeStrings(inNames, "input names"))
            using (var no = new SafetensorsFile.NativeStrings(outNames, "output names"))
            using (var nc = new SafetensorsFile.NativeStrings(constNames, "constant names"))
            {
                var o = Native.ampx_onnx_options_default();
                o.opset = options.Opset;
                o.ir_version = options.IrVersion;
                o.weight_type = options.F16Weights ? (int)Native.ampx_onnx_weight_type.AMPX_ONNX_WEIGHTS_F16
                                                   : (int)Native.ampx_onnx_weight_type.AMPX_ONNX_WEIGHTS_F32;
                o.external_data = options.ExternalData;
                o.constant_output_count = (UIntPtr)constRaw.Length;
                Native.ampx_status status;
                fixed (byte* p = Utf8.Bytes(path))
                fixed (byte* batch = options.BatchDim == null ? null : Utf8.Bytes(options.BatchDim))
                fixed (IntPtr* ti = inRaw)
                fixed (IntPtr* to = outRaw)
                fixed (IntPtr* tc = constRaw)
                fixed (IntPtr* pi = ni.Pointers)
                fixed (IntPtr* po = no.Pointers)
                fixed (IntPtr* pc = nc.Pointers)
                {
                    o.batch_dim = (IntPtr)batch;
                    o.constant_outputs = (IntPtr)tc;
                    o.constant_output_names = (IntPtr)pc;
                    status = Native.ampx_onnx_export(p, ti, (byte**)pi, (UIntPtr)inRaw.Length, to,
                                                     (byte**)po, (UIntPtr)outRaw.Length, &o);
                }
                Err.Check(status, inTensors, outTensors, constTensors);
            }
        }

        private static Tensor[] Split(IList<KeyValuePair<string, Tensor>> named, out List<string> names)
        {
            names = new List<string>();
            var tensors = new Tensor[named.Count];
            for (int i = 0; i < named.Count; ++i)
            {
                names.Add(named[i].Key);
                tensors[i] = named[i].Value;
            }
            return tensors;
        }
    }
}
