// The generated structs of Ampx.Native against the C compiler's layouts:
// run_tests.sh compiles bindings/layout/ampx_layout_probe.c with cc, which
// prints `sizeof S n`, `alignof S n` and `offsetof S.f n` for every struct of
// ampx.h; each line is compared with Marshal.SizeOf / Marshal.OffsetOf of the
// struct of the same name, and its alignment as the runtime lays it out.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using Ampx;

namespace AmpxTests
{
    public static class LayoutTests
    {
        /// <summary>The alignment a sequential struct's field of type `t` gets: its largest scalar's size.</summary>
        private static int Alignment(Type t)
        {
            if (t.IsPrimitive || t.IsEnum || t == typeof(IntPtr) || t == typeof(UIntPtr) || t.IsPointer)
                return Marshal.SizeOf(t.IsEnum ? Enum.GetUnderlyingType(t) : t.IsPointer ? typeof(IntPtr) : t);
            int align = 1;
            foreach (var f in t.GetFields(BindingFlags.Instance | BindingFlags.Public | BindingFlags.NonPublic))
            {
                var buffer = (FixedBufferAttribute)f.GetCustomAttributes(typeof(FixedBufferAttribute), false)
                                                    .FirstOrDefault();
                align = Math.Max(align, Alignment(buffer != null ? buffer.ElementType : f.FieldType));
            }
            return align;
        }

        [Test]
        public static void GeneratedStructsHaveTheCompilersLayout()
        {
            var probe = Common.Run(Common.Env("AMPX_LAYOUT_PROBE"));
            var structs = typeof(Native).GetNestedTypes()
                .Where(t => t.IsValueType && !t.IsEnum)
                .ToDictionary(t => t.Name);
            var seen = new HashSet<string>();
            int checkedLines = 0;
            foreach (var line in probe.Split(new[] { '\n' }, StringSplitOptions.RemoveEmptyEntries))
            {
                var parts = line.Split(' ');
                Assert.Equal(3, parts.Length, "probe line '" + line + "'");
                long expected = long.Parse(parts[2]);
                var names = parts[1].Split('.');
                Type type;
                Assert.True(structs.TryGetValue(names[0], out type), "Native has no struct " + names[0]);
                seen.Add(names[0]);
                long actual;
                switch (parts[0])
                {
                    case "sizeof": actual = Marshal.SizeOf(type); break;
                    case "alignof": actual = Alignment(type); break;
                    case "offsetof": actual = Marshal.OffsetOf(type, names[1]).ToInt64(); break;
                    default: throw new AssertionException("unknown probe line '" + line + "'");
                }
                Assert.Equal(expected, actual, line + " (C#)");
                ++checkedLines;
            }
            Assert.True(checkedLines > 100, "the probe printed " + checkedLines + " lines");
            foreach (var name in structs.Keys)
                Assert.True(seen.Contains(name), "the probe does not know Native." + name);
        }

        [Test]
        public static void InitMacrosEqualTheDefaultFunctions()
        {
            // The *_INIT macros are generated from clang's evaluation of the
            // header; the _default() functions are the library's own.
            Assert.Equal(Marshal.SizeOf(typeof(Native.ampx_context_options)),
                         (int)(ulong)Native.AMPX_CONTEXT_OPTIONS_INIT().struct_size, "context options size");
            var a = Native.AMPX_ADAMW_OPTIONS_INIT();
            var b = Native.ampx_adamw_options_default();
            Assert.Equal(b.lr, a.lr, "lr");
            Assert.Equal(b.weight_decay, a.weight_decay, "weight decay");
            Assert.Equal(b.decoupled_weight_decay, a.decoupled_weight_decay, "decoupled");
            var s = Native.AMPX_SCALER_OPTIONS_INIT();
            var t = Native.ampx_scaler_options_default();
            Assert.Equal(t.init_scale, s.init_scale, "init scale");
            Assert.Equal(t.growth_interval, s.growth_interval, "growth interval");
            Assert.Equal(t.hysteresis, s.hysteresis, "hysteresis");
            var p = Native.ampx_pool2d_options_default();
            Assert.Equal(p.count_include_pad, Native.AMPX_POOL2D_OPTIONS_INIT().count_include_pad, "count_include_pad");
            var d = Native.ampx_data_parallel_options_default();
            Assert.Equal((ulong)d.bucket_bytes, (ulong)Native.AMPX_DATA_PARALLEL_OPTIONS_INIT().bucket_bytes, "bucket bytes");
            Assert.Equal(Native.ampx_lr_schedule_default().gamma, Native.AMPX_LR_SCHEDULE_INIT().gamma, "gamma");
            Assert.Equal(66, Native.AMPX_DOCTOR_BIN_BINADE(0), "bin of 2^0");
            Assert.Equal(Library.Version, Native.AMPX_VERSION_NUMBER, "library and header versions");
        }
    }
}
