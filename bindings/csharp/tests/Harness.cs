// A small test runner: every static method marked [Test] in this assembly
// runs in name order (or only those whose name contains one of the
// command-line arguments), each reported as "ok" or "FAIL", then one line
// "N passed, N failed". Exit status 0 when nothing failed.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Reflection;

namespace AmpxTests
{
    [AttributeUsage(AttributeTargets.Method)]
    public sealed class TestAttribute : Attribute { }

    public sealed class AssertionException : Exception
    {
        public AssertionException(string message) : base(message) { }
    }

    public static class Assert
    {
        public static void True(bool condition, string message)
        {
            if (!condition) throw new AssertionException(message);
        }

        public static void Equal<T>(T expected, T actual, string what)
        {
            if (!EqualityComparer<T>.Default.Equals(expected, actual))
                throw new AssertionException(what + ": expected " + expected + ", got " + actual);
        }

        public static void Close(double expected, double actual, double tolerance, string what)
        {
            if (!(Math.Abs(expected - actual) <= tolerance))
                throw new AssertionException(what + ": expected " + expected.ToString("R") + " +- " + tolerance +
                                             ", got " + actual.ToString("R"));
        }

        public static T Throws<T>(Action action, string what) where T : Exception
        {
            try
            {
                action();
            }
            catch (T e)
            {
                return e;
            }
            catch (Exception e)
            {
                throw new AssertionException(what + ": expected " + typeof(T).Name + ", got " + e.GetType().Name +
                                             ": " + e.Message);
            }
            throw new AssertionException(what + ": expected " + typeof(T).Name + ", nothing was thrown");
        }
    }

    public static class Program
    {
        public static int Main(string[] args)
        {
            if (args.Length > 0 && args[0] == "--mpi") return MpiTests.Run();
            var tests = typeof(Program).Assembly.GetTypes()
                .SelectMany(t => t.GetMethods(BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Static))
                .Where(m => m.GetCustomAttributes(typeof(TestAttribute), false).Length > 0)
                .OrderBy(m => m.DeclaringType.Name + "." + m.Name, StringComparer.Ordinal)
                .Where(m => args.Length == 0 || args.Any(a => (m.DeclaringType.Name + "." + m.Name).Contains(a)))
                .ToList();
            int passed = 0, failed = 0;
            var total = Stopwatch.StartNew();
            foreach (var test in tests)
            {
                var name = test.DeclaringType.Name + "." + test.Name;
                var watch = Stopwatch.StartNew();
                try
                {
                    test.Invoke(null, null);
                    ++passed;
                    Console.WriteLine("ok    {0} ({1} ms)", name, watch.ElapsedMilliseconds);
                }
                catch (TargetInvocationException e)
                {
                    ++failed;
                    Console.WriteLine("FAIL  {0}: {1}", name, e.InnerException);
                }
                Console.Out.Flush();
            }
            Console.WriteLine("csharp tests: {0} ms", total.ElapsedMilliseconds);
            Console.WriteLine("{0} passed, {1} failed", passed, failed);
            return failed == 0 && passed > 0 ? 0 : 1;
        }
    }
}
