//! Data-parallel training over MPI ranks. Built only with the `mpi` feature
//! and run by run_tests.sh as
//!
//! ```text
//! mpirun --allow-run-as-root --oversubscribe -np 2 <this test's executable>
//! ```
//!
//! No MPI crate: the few MPI calls are declared here and linked from libmpi
//! with the flags of `mpicc --showme:link` (build.rs). The communicator is
//! Open MPI's `MPI_COMM_WORLD`, which is `&ompi_mpi_comm_world` (Open MPI's
//! `MPI_Comm` is a pointer); ampx_comm_from_mpi takes the address of a
//! variable holding it.
//!
//! Each rank trains a linear model with SGD on its half of every batch,
//! from its own initial parameters. After `DataParallel::new` and after
//! every step, all ranks' parameters must be bitwise identical (rank 0's
//! were broadcast), and equal, to reduction rounding, to a double-precision
//! computation here of one process stepping with the averaged gradient of
//! the whole batch. Then gradient accumulation (`no_sync`), an engine's own
//! reduction (`reduce`), and bad input: stepping while sync is off,
//! parameters that differ across ranks, an optimizer wrapped twice -- each
//! an `Err` on every rank, never a hang. Prints one line per rank; exits 1
//! if any rank failed a check.
use std::ffi::c_void;
use std::os::raw::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use ampx::{
    Activation, Communicator, Context, ContextOptions, DType, DataParallel, DataParallelOptions, Fp8Recipe,
    Fp8RecipeOptions, Fp8Role, Optimizer, Reduction, SgdOptions, Status, Tensor,
};

include!(concat!(env!("OUT_DIR"), "/mpi_link.rs"));

/// Open MPI's handles are pointers to its predefined objects.
type MpiComm = *const c_void;
type MpiDatatype = *const c_void;

extern "C" {
    static ompi_mpi_comm_world: u8;
    static ompi_mpi_byte: u8;
    fn MPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int;
    fn MPI_Finalize() -> c_int;
    fn MPI_Comm_rank(comm: MpiComm, rank: *mut c_int) -> c_int;
    fn MPI_Comm_size(comm: MpiComm, size: *mut c_int) -> c_int;
    fn MPI_Allgather(
        send: *const c_void,
        send_count: c_int,
        send_type: MpiDatatype,
        receive: *mut c_void,
        receive_count: c_int,
        receive_type: MpiDatatype,
        comm: MpiComm,
    ) -> c_int;
    fn MPI_Abort(comm: MpiComm, code: c_int) -> c_int;
}

const IN: usize = 4;
const OUT: usize = 2;
const BATCH: usize = 8;
const STEPS: usize = 5;
const LR: f64 = 0.1;

struct Mpi {
    world: MpiComm,
    rank: usize,
    size: usize,
}

impl Mpi {
    /// Every rank's `bytes` (of equal length on every rank), in rank order.
    fn allgather(&self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut all = vec![0u8; bytes.len() * self.size];
        // SAFETY: buffers of the sizes given; MPI is initialised.
        let status = unsafe {
            let byte = ptr::addr_of!(ompi_mpi_byte).cast::<c_void>();
            MPI_Allgather(
                bytes.as_ptr().cast(),
                bytes.len() as c_int,
                byte,
                all.as_mut_ptr().cast(),
                bytes.len() as c_int,
                byte,
                self.world,
            )
        };
        assert_eq!(status, 0, "MPI_Allgather failed");
        all.chunks(bytes.len().max(1)).map(<[u8]>::to_vec).take(self.size).collect()
    }

    fn same_on_every_rank(&self, bytes: &[u8]) -> bool {
        self.allgather(bytes).iter().all(|other| other == bytes)
    }
}

struct Checks {
    rank: usize,
    passed: usize,
    failed: Vec<String>,
}

impl Checks {
    fn check(&mut self, ok: bool, what: impl Into<String>) {
        if ok {
            self.passed += 1;
        } else {
            let what = what.into();
            eprintln!("rank {}: FAILED: {what}", self.rank);
            self.failed.push(what);
        }
    }
}

fn x_value(i: usize, j: usize) -> f32 {
    ((i * 7 + j * 3) % 11) as f32 / 8.0 - 0.5
}

fn target_value(i: usize, k: usize) -> f32 {
    ((i * 5 + k * 2) % 7) as f32 / 4.0 - 0.75
}

/// A rank's own initial parameters (exact in f32).
fn initial(seed: usize, n: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 13 + seed * 29 + 3) % 17) as f32 - 8.0) / 16.0).collect()
}

fn rows(first: usize, count: usize, columns: usize, value: fn(usize, usize) -> f32) -> Vec<f32> {
    (first..first + count).flat_map(|i| (0..columns).map(move |j| value(i, j))).collect()
}

fn bytes_of(tensors: &[&Tensor]) -> Vec<u8> {
    tensors.iter().flat_map(|t| t.to_bytes().unwrap()).collect()
}

/// A linear model y = x W^T + b on one rank, wrapped for data parallelism.
struct Trainer {
    ctx: Context,
    w: Tensor,
    b: Tensor,
    opt: Optimizer,
    // Dropping it is a collective: every rank drops its trainers at the
    // same points of the program.
    dp: Option<DataParallel>,
    comm: Option<Communicator>,
}

impl Trainer {
    fn new(mpi: &Mpi, seed: usize) -> Trainer {
        let ctx = Context::with_options(&ContextOptions { num_threads: 1, ..Default::default() }).unwrap();
        let w = Tensor::from_slice(&ctx, &[OUT as i64, IN as i64], &initial(seed, OUT * IN)).unwrap();
        let b = Tensor::from_slice(&ctx, &[OUT as i64], &initial(seed + 100, OUT)).unwrap();
        w.set_requires_grad(true).unwrap();
        b.set_requires_grad(true).unwrap();
        let opt = Optimizer::sgd(&ctx, &[&w, &b], &SgdOptions { lr: LR, ..Default::default() }).unwrap();
        let world = mpi.world;
        // SAFETY: `world` holds Open MPI's MPI_COMM_WORLD, initialised;
        // ampx reads it during the call only.
        let comm = unsafe { Communicator::from_mpi(&ctx, ptr::addr_of!(world).cast()) }.unwrap();
        let dp = DataParallel::new(&comm, &opt, &DataParallelOptions::default()).unwrap();
        Trainer { ctx, w, b, opt, dp: Some(dp), comm: Some(comm) }
    }

    fn backward(&self, first: usize, count: usize, reduction: Reduction) {
        let x = Tensor::from_slice(&self.ctx, &[count as i64, IN as i64], &rows(first, count, IN, x_value)).unwrap();
        let t = Tensor::from_slice(&self.ctx, &[count as i64, OUT as i64], &rows(first, count, OUT, target_value))
            .unwrap();
        let loss = x.linear(&self.w, Some(&self.b), Activation::None).unwrap().mse_loss(&t, reduction).unwrap();
        loss.backward(None).unwrap();
    }

    fn dp(&self) -> &DataParallel {
        self.dp.as_ref().unwrap()
    }

    fn params(&self) -> Vec<u8> {
        bytes_of(&[&self.w, &self.b])
    }
}

/// One process stepping with the gradient of the mean squared error over
/// the whole batch, in double precision.
fn reference(steps: usize) -> (Vec<f64>, Vec<f64>) {
    let mut w: Vec<f64> = initial(0, OUT * IN).into_iter().map(f64::from).collect();
    let mut b: Vec<f64> = initial(100, OUT).into_iter().map(f64::from).collect();
    let scale = 2.0 / (BATCH * OUT) as f64;
    for _ in 0..steps {
        let (mut gw, mut gb) = (vec![0.0; OUT * IN], vec![0.0; OUT]);
        for i in 0..BATCH {
            for k in 0..OUT {
                let y: f64 = b[k] + (0..IN).map(|j| w[k * IN + j] * f64::from(x_value(i, j))).sum::<f64>();
                let r = y - f64::from(target_value(i, k));
                gb[k] += scale * r;
                for j in 0..IN {
                    gw[k * IN + j] += scale * r * f64::from(x_value(i, j));
                }
            }
        }
        w.iter_mut().zip(&gw).for_each(|(p, g)| *p -= LR * g);
        b.iter_mut().zip(&gb).for_each(|(p, g)| *p -= LR * g);
    }
    (w, b)
}

fn max_relative_difference(values: &[f32], reference: &[f64]) -> f64 {
    let size = reference.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    values.iter().zip(reference).fold(0.0f64, |m, (a, r)| m.max((f64::from(*a) - r).abs())) / size
}

fn against_one_process(mpi: &Mpi, checks: &mut Checks) {
    let t = Trainer::new(mpi, mpi.rank);
    let comm = t.comm.as_ref().unwrap();
    checks.check(
        (comm.rank().unwrap(), comm.size().unwrap()) == (mpi.rank, mpi.size),
        "the communicator's rank and size are MPI's",
    );
    let rank0: Vec<u8> = [initial(0, OUT * IN), initial(100, OUT)].concat().iter().flat_map(|v| v.to_ne_bytes()).collect();
    checks.check(t.params() == rank0, "rank 0's parameters were broadcast to this rank");
    let per_rank = BATCH / mpi.size;
    let mut identical = true;
    for _ in 0..STEPS {
        t.opt.zero_grad().unwrap();
        t.backward(mpi.rank * per_rank, per_rank, Reduction::Mean);
        t.opt.step().unwrap();
        identical &= mpi.same_on_every_rank(&t.params());
    }
    checks.check(identical, "parameters bitwise identical on every rank after every step");
    let (w, b) = reference(STEPS);
    let dw = max_relative_difference(&t.w.to_vec::<f32>().unwrap(), &w);
    let db = max_relative_difference(&t.b.to_vec::<f32>().unwrap(), &b);
    checks.check(dw < 1e-5 && db < 1e-5, format!("within 1e-5 of one process in double: w {dw:.1e}, b {db:.1e}"));
    let stats = t.dp().stats().unwrap();
    checks.check(
        (stats.rank, stats.world_size, stats.reductions) == (mpi.rank, mpi.size, STEPS as i64),
        format!("stats {stats:?}"),
    );
    if mpi.rank == 0 {
        println!(
            "data_parallel_mpi: {} ranks, {STEPS} steps: max relative difference from one process in double: w {dw:.1e}, b {db:.1e}",
            mpi.size
        );
    }

    // Stepping while sync is off would step on this rank's own gradients.
    t.opt.zero_grad().unwrap();
    t.dp().set_sync(false).unwrap();
    t.backward(mpi.rank * per_rank, per_rank, Reduction::Mean);
    let e = t.opt.step().unwrap_err();
    checks.check(e.status() == Status::Order, format!("a step with sync off is refused: {e}"));
    t.dp().set_sync(true).unwrap();
    checks.check(t.dp().sync(), "sync is on again");
    // An optimizer is wrapped once.
    let e = DataParallel::new(comm, &t.opt, &DataParallelOptions::default()).unwrap_err();
    checks.check(e.status() == Status::InvalidArgument, format!("a second wrapper is refused: {e}"));
}

/// Two micro-batches, the first under no_sync, against one backward over
/// the rank's rows; summed losses, so the gradients add up.
fn accumulation(mpi: &Mpi, checks: &mut Checks) {
    let (accumulating, whole) = (Trainer::new(mpi, mpi.rank), Trainer::new(mpi, mpi.rank));
    let per_rank = BATCH / mpi.size;
    let first = mpi.rank * per_rank;
    let mut launched = usize::MAX;
    for _ in 0..3 {
        accumulating.opt.zero_grad().unwrap();
        {
            let _no_sync = accumulating.dp().no_sync().unwrap();
            accumulating.backward(first, per_rank / 2, Reduction::Sum);
            launched = accumulating.dp().stats().unwrap().buckets_launched;
        }
        accumulating.backward(first + per_rank / 2, per_rank - per_rank / 2, Reduction::Sum);
        accumulating.opt.step().unwrap();
        whole.opt.zero_grad().unwrap();
        whole.backward(first, per_rank, Reduction::Sum);
        whole.opt.step().unwrap();
    }
    checks.check(launched == 0, "no_sync: nothing sent");
    checks.check(accumulating.dp().stats().unwrap().reductions == 3, "no_sync: one reduction per step");
    checks.check(mpi.same_on_every_rank(&accumulating.params()), "no_sync: bitwise identical on every rank");
    let a = accumulating.w.to_vec::<f32>().unwrap();
    let w: Vec<f64> = whole.w.to_vec::<f32>().unwrap().into_iter().map(f64::from).collect();
    let d = max_relative_difference(&a, &w);
    checks.check(d < 1e-6, format!("no_sync: {d:.1e} from one backward over the rows"));
}

/// An engine with its own backward pass writes the gradients and reduces
/// them itself: the result is the ranks' average.
fn engine_reduction(mpi: &Mpi, checks: &mut Checks) {
    let t = Trainer::new(mpi, mpi.rank);
    let own = |rank: usize, n: usize| -> Vec<f32> { (0..n).map(|i| (rank + 1) as f32 * (i as f32 + 1.0) / 8.0).collect() };
    for (p, n) in [(&t.w, OUT * IN), (&t.b, OUT)] {
        p.grad().unwrap().expect("a bucket view").copy_from_slice(&own(mpi.rank, n)).unwrap();
        p.grad_ready().unwrap();
    }
    t.dp().reduce().unwrap();
    for (p, n) in [(&t.w, OUT * IN), (&t.b, OUT)] {
        let average: Vec<f32> = (0..n)
            .map(|i| (0..mpi.size).map(|r| own(r, n)[i]).sum::<f32>() / mpi.size as f32)
            .collect();
        let grad = p.grad().unwrap().unwrap().to_vec::<f32>().unwrap();
        checks.check(grad == average, format!("reduce: the ranks' average {average:?}, got {grad:?}"));
    }
}

/// Ranks whose parameters differ all fail, none hangs, and the message names
/// the first difference; the communicator keeps working.
fn mismatched_parameters(mpi: &Mpi, checks: &mut Checks) {
    let ctx = Context::with_options(&ContextOptions { num_threads: 1, ..Default::default() }).unwrap();
    let world = mpi.world;
    // SAFETY: as in Trainer::new.
    let comm = unsafe { Communicator::from_mpi(&ctx, ptr::addr_of!(world).cast()) }.unwrap();
    let last = mpi.size - 1;
    let shape: &[i64] = if mpi.rank == last { &[3, 4] } else { &[4, 3] };
    let a = Tensor::zeros(&ctx, DType::F32, shape).unwrap();
    let b = Tensor::zeros(&ctx, DType::F32, &[4]).unwrap();
    a.set_requires_grad(true).unwrap();
    b.set_requires_grad(true).unwrap();
    let opt = Optimizer::sgd(&ctx, &[&b, &a], &SgdOptions::default()).unwrap();
    match DataParallel::new(&comm, &opt, &DataParallelOptions::default()) {
        Ok(_) => checks.check(false, "parameters that differ across ranks were accepted"),
        Err(e) => {
            let expected = format!("parameter 1 is f32[3, 4] on rank {last} but f32[4, 3] on rank 0");
            checks.check(
                e.status() == Status::InvalidArgument && e.message().contains(&expected),
                format!("the mismatch is reported: {e}"),
            );
        }
    }
    let opt = Optimizer::sgd(&ctx, &[&b], &SgdOptions::default()).unwrap();
    checks.check(DataParallel::new(&comm, &opt, &DataParallelOptions::default()).is_ok(), "the communicator still works");
}

/// A recipe attached to the wrapper takes the MAX of the ranks' step
/// amaxes (rank r quantizes a tensor of amax 2 (r + 1)): every rank's scale
/// is then 448 / (2 size) (delayed scaling, margin 0), bitwise equal.
fn fp8_amax_over_ranks(mpi: &Mpi, checks: &mut Checks) {
    let t = Trainer::new(mpi, 1);
    let recipe = Fp8Recipe::new(&t.ctx, &Fp8RecipeOptions { amax_history_len: 2, ..Default::default() }).unwrap();
    let slot = recipe.add_tensor(Fp8Role::Forward, Some("x")).unwrap();
    t.dp().set_fp8_recipe(Some(&recipe)).unwrap();
    let x = Tensor::from_slice(&t.ctx, &[2], &[0.5f32, -2.0 * (mpi.rank + 1) as f32]).unwrap();
    recipe.quantized(slot, &x).unwrap();
    recipe.update().unwrap(); // no unscale came first: the update reduces itself
    let info = recipe.slot(slot).unwrap();
    let expected = 448f32 / (2 * mpi.size) as f32;
    checks.check(info.scale == expected, format!("fp8: scale {} == 448 / (2 * {})", info.scale, mpi.size));
    checks.check(info.history == [0.0, 2.0 * mpi.size as f32], format!("fp8: history {:?}", info.history));
    let scales = mpi.allgather(&info.scale.to_le_bytes());
    checks.check(scales.iter().all(|s| s[..4] == info.scale.to_le_bytes()), "fp8: equal scales on every rank");
    t.dp().set_fp8_recipe(None).unwrap();
}

fn main() {
    // SAFETY: MPI's own initialisation with no arguments, once, on the main thread.
    unsafe { MPI_Init(ptr::null_mut(), ptr::null_mut()) };
    // SAFETY: the address of Open MPI's predefined world communicator
    // (taking it needs `unsafe` before Rust 1.82).
    #[allow(unused_unsafe)]
    let world: MpiComm = unsafe { ptr::addr_of!(ompi_mpi_comm_world) }.cast();
    let (mut rank, mut size) = (0, 0);
    // SAFETY: MPI is initialised; valid out pointers.
    unsafe {
        MPI_Comm_rank(world, &mut rank);
        MPI_Comm_size(world, &mut size);
    }
    let mpi = Mpi { world, rank: rank as usize, size: size as usize };
    if size < 2 || BATCH % mpi.size != 0 || (BATCH / mpi.size) % 2 != 0 {
        eprintln!("data_parallel_mpi: run it under mpirun with 2 or 4 ranks (found {size})");
        // SAFETY: ends every rank's MPI.
        unsafe { MPI_Abort(world, 2) };
    }
    let mut checks = Checks { rank: mpi.rank, passed: 0, failed: Vec::new() };
    let run = catch_unwind(AssertUnwindSafe(|| {
        against_one_process(&mpi, &mut checks);
        accumulation(&mpi, &mut checks);
        engine_reduction(&mpi, &mut checks);
        mismatched_parameters(&mpi, &mut checks);
        fp8_amax_over_ranks(&mpi, &mut checks);
    }));
    if run.is_err() {
        // The other ranks would wait for this one in their next collective:
        // end the job, as mpirun does for a rank that dies.
        eprintln!("rank {}: a panic (above); ending the job", mpi.rank);
        // SAFETY: ends every rank's MPI.
        unsafe { MPI_Abort(world, 1) };
    }
    let failed: usize = mpi
        .allgather(&(checks.failed.len() as u32).to_le_bytes())
        .iter()
        .map(|b| u32::from_le_bytes(b[..4].try_into().unwrap()) as usize)
        .sum();
    println!(
        "data_parallel_mpi rank {} of {}: {} checks passed, {} failed here, {failed} on all ranks",
        mpi.rank,
        mpi.size,
        checks.passed,
        checks.failed.len()
    );
    // SAFETY: every rank reaches this point after its last MPI call.
    unsafe { MPI_Finalize() };
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
