using System.Runtime.CompilerServices;

// The tests (bindings/csharp/tests, built as AmpxTests) read the deferred
// release counters of a Context.
[assembly: InternalsVisibleTo("AmpxTests")]
