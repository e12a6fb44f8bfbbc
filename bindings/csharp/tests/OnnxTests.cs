// ONNX export through Onnx.Export: a recorded linear layer written as a
// model (a protobuf ModelProto whose first field is ir_version 8), and an
// output that no input reaches refused with no file left. The Python test
// (tests/onnx) runs every exported model in ONNX Runtime.
using System.Collections.Generic;
using System.IO;
using Ampx;

namespace AmpxTests
{
    public static class OnnxTests
    {
        [Test]
        public static void ExportWritesAModelAndRefusesUnreachedOutputs()
        {
            var dir = Common.TempDir();
            var path = Path.Combine(dir, "linear.onnx");
            using (var ctx = new Context())
            using (var w = Tensor.FromArray(ctx, new float[] { 0.5f, -1, 0.25f, 2, 0, -0.5f }, new long[] { 2, 3 }))
            using (var x = Tensor.FromArray(ctx, new float[] { 1, 2, 3 }, new long[] { 1, 3 }))
            using (var lone = Tensor.FromArray(ctx, new float[] { 1 }, new long[] { 1 }))
            {
                w.RequiresGrad = true;
                x.RequiresGrad = true;
                using (var y = Tensor.Linear(x, w, null, Activation.Relu))
                {
                    Onnx.Export(path, new[] { new KeyValuePair<string, Tensor>("x", x) },
                                new[] { new KeyValuePair<string, Tensor>("y", y) },
                                new OnnxOptions { BatchDim = "batch" });
                    var bytes = File.ReadAllBytes(path);
                    Assert.Equal(0x08, (int)bytes[0], "ModelProto field 1, a varint");
                    Assert.Equal(8, (int)bytes[1], "ir_version 8");
                }
                var bad = Path.Combine(dir, "bad.onnx");
                var e = Assert.Throws<AmpxException>(
                    () => Onnx.Export(bad, new[] { new KeyValuePair<string, Tensor>("x", x) },
                                      new[] { new KeyValuePair<string, Tensor>("lone", lone) }),
                    "an output no input reaches");
                Assert.Equal(Status.ErrInvalidArgument, e.Status, "its status");
                Assert.True(!File.Exists(bad), "no file left");
            }
            Directory.Delete(dir, true);
        }
    }
}
