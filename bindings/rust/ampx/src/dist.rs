//! Data-parallel training (section 14 of ampx.h, EXPERIMENTAL):
//! communicators and gradient all-reduce.
//!
//! One process per device; every process runs the same training loop on its
//! own part of each batch. A [`Communicator`] is made from the host's MPI
//! (CPU contexts, [`Communicator::from_mpi`]) or NCCL (CUDA contexts,
//! [`Communicator::init_nccl`] with the id rank 0 made by
//! [`nccl_unique_id`], or [`Communicator::from_nccl`]). A [`DataParallel`]
//! wraps an optimizer so that `backward` all-reduces the gradients while it
//! runs; the scaler's found-inf is reduced too, so every rank skips the
//! same steps and the parameters stay bitwise identical on every rank.
//!
//! Collective calls -- making a communicator or a [`DataParallel`], every
//! call that completes a reduction (backward, unscale, step, clipping,
//! [`DataParallel::reduce`]) and dropping a [`DataParallel`] -- must be made
//! by every rank, in the same order.
use std::cell::Cell;
use std::ffi::c_void;
use std::fmt;
use std::ptr::{self, NonNull};

use ampx_sys as sys;

use crate::context::Context;
use crate::error::{check, Error, Result, Status};
use crate::optim::Optimizer;

/// The bytes of an NCCL unique id (`AMPX_NCCL_UNIQUE_ID_BYTES`).
pub const NCCL_UNIQUE_ID_BYTES: usize = sys::AMPX_NCCL_UNIQUE_ID_BYTES as usize;

/// A new NCCL unique id (`ampx_nccl_unique_id`), made on rank 0: send its
/// bytes to every other rank by any means, then call
/// [`Communicator::init_nccl`] on every rank. `NotSupported` where NCCL
/// cannot be loaded.
pub fn nccl_unique_id() -> Result<[u8; NCCL_UNIQUE_ID_BYTES]> {
    let mut id = [0u8; NCCL_UNIQUE_ID_BYTES];
    // SAFETY: `id` has exactly the bytes the call writes.
    check(unsafe { sys::ampx_nccl_unique_id(id.as_mut_ptr().cast(), id.len()) })?;
    Ok(id)
}

/// A group of ranks bound to one context (`ampx_comm`). It keeps its
/// context alive; a [`DataParallel`] keeps it alive in the library. `Drop`
/// releases the program's reference (completing pending collectives).
pub struct Communicator {
    raw: NonNull<sys::ampx_comm_s>,
}

impl Communicator {
    fn created(f: impl FnOnce(*mut sys::ampx_comm) -> sys::ampx_status) -> Result<Communicator> {
        let mut out = ptr::null_mut();
        check(f(&mut out))?;
        Ok(Communicator { raw: NonNull::new(out).expect("ampx returned a NULL communicator") })
    }

    /// A communicator over the ranks of the host's MPI communicator, for a
    /// CPU context (`ampx_comm_from_mpi`). Collective over that
    /// communicator. ampx duplicates it, so its messages never mix with the
    /// program's, and the program keeps owning its own. Errors:
    /// `NotSupported` for a CUDA context (use NCCL) or when the MPI plugin
    /// (`libampx_mpi.so`) or libmpi cannot be loaded; `InvalidArgument` when
    /// MPI is not initialised.
    ///
    /// # Safety
    /// `mpi_comm` must point to an `MPI_Comm` (the variable holding the
    /// handle, e.g. `&comm`; with Open MPI an `MPI_Comm` is itself a
    /// pointer, and `MPI_COMM_WORLD` is `&ompi_mpi_comm_world`) of the MPI
    /// implementation the plugin was built against, initialised
    /// (`MPI_Init`) and not finalized. It is read during the call only.
    pub unsafe fn from_mpi(ctx: &Context, mpi_comm: *const c_void) -> Result<Communicator> {
        Communicator::created(|out| sys::ampx_comm_from_mpi(ctx.as_raw(), mpi_comm, out))
    }

    /// A communicator over the program's own `ncclComm_t`, for a CUDA
    /// context on the communicator's device (`ampx_comm_from_nccl`). The
    /// program keeps owning it and destroys it after dropping this value --
    /// unless ampx aborted it after a timeout ([`Communicator::set_timeout`]),
    /// which frees it. `NotSupported` for a CPU context or without NCCL.
    ///
    /// # Safety
    /// `nccl_comm` must be a live `ncclComm_t` that outlives this value and
    /// every [`DataParallel`] made with it.
    pub unsafe fn from_nccl(ctx: &Context, nccl_comm: *mut c_void) -> Result<Communicator> {
        Communicator::created(|out| sys::ampx_comm_from_nccl(ctx.as_raw(), nccl_comm, out))
    }

    /// A new NCCL communicator of `world_size` ranks, this process being
    /// `rank`, for a CUDA context, from the [`nccl_unique_id`] bytes rank 0
    /// made (`ampx_comm_init_nccl`). Blocks until every rank has called it.
    /// ampx owns the NCCL communicator. Errors: `InvalidArgument` for an id
    /// of another length or a rank outside `0..world_size`; `NotSupported`
    /// for a CPU context or without NCCL.
    pub fn init_nccl(ctx: &Context, unique_id: &[u8], world_size: usize, rank: usize) -> Result<Communicator> {
        let count = |v: usize, what: &str| {
            i32::try_from(v).map_err(|_| Error::new(Status::InvalidArgument, format!("{what} {v} does not fit int32")))
        };
        let (world_size, rank) = (count(world_size, "world_size")?, count(rank, "rank")?);
        // SAFETY: live context; `unique_id` is valid for its length.
        Communicator::created(|out| unsafe {
            sys::ampx_comm_init_nccl(ctx.as_raw(), unique_id.as_ptr().cast(), unique_id.len(), world_size, rank, out)
        })
    }

    /// The handle, borrowed: valid while `self` lives.
    pub fn as_raw(&self) -> sys::ampx_comm {
        self.raw.as_ptr()
    }

    fn rank_and_size(&self) -> Result<(usize, usize)> {
        let (mut rank, mut size) = (0, 0);
        // SAFETY: live handle, valid out pointers.
        check(unsafe { sys::ampx_comm_rank(self.as_raw(), &mut rank, &mut size) })?;
        Ok((rank.max(0) as usize, size.max(0) as usize))
    }

    /// This process's rank, in `0..size()` (`ampx_comm_rank`).
    pub fn rank(&self) -> Result<usize> {
        Ok(self.rank_and_size()?.0)
    }

    /// The number of ranks (`ampx_comm_rank`).
    pub fn size(&self) -> Result<usize> {
        Ok(self.rank_and_size()?.1)
    }

    /// The longest a host wait on this communicator's NCCL collectives may
    /// take before ampx aborts it and fails with `Status::Device` (default
    /// 600 s; finite and > 0, else `InvalidArgument`) (`ampx_comm_set_timeout`).
    /// MPI waits cannot be interrupted: there the launcher ends a job whose
    /// rank died.
    pub fn set_timeout(&self, seconds: f64) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_comm_set_timeout(self.as_raw(), seconds) })
    }
}

owns_reference!(Communicator, release: sys::ampx_comm_release);

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator").field("raw", &self.raw).field("rank_and_size", &self.rank_and_size().ok()).finish()
    }
}

/// Options of [`DataParallel::new`] (`ampx_data_parallel_options`);
/// `Default` is the library's (`ampx_data_parallel_options_default`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataParallelOptions {
    /// Gradient bytes per bucket (default 25 MiB, DDP's bucket_cap_mb).
    pub bucket_bytes: usize,
    /// The first bucket of each dtype, reduced first (default 1 MiB).
    pub first_bucket_bytes: usize,
    /// true (default): gradients averaged over the ranks; false: summed.
    pub average: bool,
    /// true: F16/BF16 gradients are reduced in fp32; false (default): in
    /// their own dtype.
    pub reduce_in_fp32: bool,
    /// true (default): buckets are reduced while backward runs; false: all
    /// after it.
    pub overlap: bool,
    /// 0 (default): every rank keeps the whole optimizer state; 1 (ZeRO-1):
    /// each rank keeps and steps its part only (see ampx.h).
    pub zero_stage: i32,
}

mirror_options!(DataParallelOptions, sys::ampx_data_parallel_options, sys::ampx_data_parallel_options_default,
                numbers: [bucket_bytes, first_bucket_bytes, zero_stage],
                flags: [average, reduce_in_fp32, overlap]);

/// Ranks, buckets and reduction counts ([`DataParallel::stats`];
/// `ampx_data_parallel_stats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataParallelStats {
    /// This process's rank.
    pub rank: usize,
    /// The number of ranks.
    pub world_size: usize,
    /// Gradient buckets.
    pub bucket_count: usize,
    /// Bytes of the gradient buckets and fp32 reduction buffers.
    pub bucket_bytes: u64,
    /// Buckets sent so far in the iteration under way.
    pub buckets_launched: usize,
    /// Of the last reduction: buckets sent during backward.
    pub last_launched_early: usize,
    /// Reductions completed.
    pub reductions: i64,
    /// This rank's fp32 masters and moments.
    pub optimizer_state_bytes: u64,
    /// Parameter elements this rank's optimizer updates (all, or its part
    /// under ZeRO-1).
    pub shard_elements: i64,
}

/// An optimizer whose gradients are reduced over a communicator's ranks
/// (`ampx_data_parallel`; torch's DistributedDataParallel).
///
/// Made collectively: every rank wraps an optimizer with the same
/// parameters (in order, with equal dtypes and shapes; a mismatch fails on
/// every rank with a message naming it). Rank 0's parameters, fp32 masters
/// and moments are then broadcast, and each parameter's gradient becomes a
/// view of a flat bucket: keep those gradients attached
/// ([`Optimizer::zero_grad`] zeroes them in place; replacing one with
/// [`crate::Tensor::set_grad`] makes the next backward fail with
/// `Status::Order`), and add no param groups.
///
/// The training loop is unchanged: backward reduces the buckets while it
/// runs and has reduced every gradient when it returns. The wrapper keeps
/// the communicator and the optimizer alive in the library. `Drop`
/// releases it -- a collective (pending reductions complete): drop it at
/// the same point on every rank.
pub struct DataParallel {
    raw: NonNull<sys::ampx_data_parallel_s>,
    sync: Cell<bool>,
}

impl DataParallel {
    /// Wraps `optimizer` for data-parallel training over `comm`
    /// (`ampx_data_parallel_create`). Collective. Errors: `InvalidArgument`
    /// (bucket sizes 0, zero_stage not 0 or 1, an optimizer wrapped already,
    /// parameters that differ across ranks); `Device` (communicator and
    /// optimizer of different contexts); nothing changes on error.
    pub fn new(comm: &Communicator, optimizer: &Optimizer, options: &DataParallelOptions) -> Result<DataParallel> {
        let raw = options.to_raw();
        let mut out = ptr::null_mut();
        // SAFETY: live handles; the options outlive the call.
        check(unsafe { sys::ampx_data_parallel_create(comm.as_raw(), optimizer.as_raw(), &raw, &mut out) })?;
        Ok(DataParallel {
            raw: NonNull::new(out).expect("ampx returned a NULL data-parallel wrapper"),
            sync: Cell::new(true),
        })
    }

    /// The handle, borrowed: valid while `self` lives.
    pub fn as_raw(&self) -> sys::ampx_data_parallel {
        self.raw.as_ptr()
    }

    /// Whether backward passes reduce the gradients (see [`DataParallel::set_sync`]).
    pub fn sync(&self) -> bool {
        self.sync.get()
    }

    /// Gradient accumulation (`ampx_data_parallel_set_sync`, DDP's no_sync):
    /// with `sync` false backward passes only accumulate and nothing is
    /// communicated; turn it back on before the last micro-batch's
    /// backward, which reduces the sum. Unscaling, clipping or stepping
    /// while it is off is `Status::Order`.
    pub fn set_sync(&self, sync: bool) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_data_parallel_set_sync(self.as_raw(), sync.into()) })?;
        self.sync.set(sync);
        Ok(())
    }

    /// Turns sync off until the returned guard is dropped, which restores
    /// the former setting: the backward passes inside only accumulate.
    pub fn no_sync(&self) -> Result<NoSyncGuard<'_>> {
        let previous = self.sync();
        self.set_sync(false)?;
        Ok(NoSyncGuard { dp: self, previous })
    }

    /// Completes the reduction now (`ampx_data_parallel_reduce`), for
    /// engines with their own backward pass that report gradients with
    /// [`crate::Tensor::grad_ready`]; nothing to do when backward has
    /// reduced them already. Collective. `Status::Order` while sync is off.
    pub fn reduce(&self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::ampx_data_parallel_reduce(self.as_raw()) })
    }

    /// Ranks, buckets and reduction counts (`ampx_data_parallel_get_stats`;
    /// no sync).
    pub fn stats(&self) -> Result<DataParallelStats> {
        let mut s = sys::ampx_data_parallel_stats::default();
        // SAFETY: live handle; struct_size set.
        check(unsafe { sys::ampx_data_parallel_get_stats(self.as_raw(), &mut s) })?;
        let count = |v: i32| v.max(0) as usize;
        Ok(DataParallelStats {
            rank: count(s.rank),
            world_size: count(s.world_size),
            bucket_count: count(s.bucket_count),
            bucket_bytes: s.bucket_bytes,
            buckets_launched: count(s.buckets_launched),
            last_launched_early: count(s.last_launched_early),
            reductions: s.reductions,
            optimizer_state_bytes: s.optimizer_state_bytes,
            shard_elements: s.shard_elements,
        })
    }

    /// Makes this wrapper MAX-reduce `recipe`'s step amaxes over the ranks
    /// before its updates, so every rank's FP8 scales stay bitwise equal
    /// (`ampx_data_parallel_set_fp8_recipe`; the wrapper keeps a reference);
    /// `None` detaches. Every rank attaches a recipe with the same slots.
    pub fn set_fp8_recipe(&self, recipe: Option<&crate::fp8::Fp8Recipe>) -> Result<()> {
        let recipe = recipe.map_or(ptr::null_mut(), crate::fp8::Fp8Recipe::as_raw);
        // SAFETY: live handles (or NULL).
        check(unsafe { sys::ampx_data_parallel_set_fp8_recipe(self.as_raw(), recipe) })
    }
}

owns_reference!(DataParallel, release: sys::ampx_data_parallel_release);

impl fmt::Debug for DataParallel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataParallel").field("raw", &self.raw).field("stats", &self.stats().ok()).finish()
    }
}

/// Restores the former sync setting when dropped (see [`DataParallel::no_sync`]).
#[must_use = "sync is restored as soon as the guard is dropped"]
pub struct NoSyncGuard<'a> {
    dp: &'a DataParallel,
    previous: bool,
}

impl Drop for NoSyncGuard<'_> {
    fn drop(&mut self) {
        let _ = self.dp.set_sync(self.previous);
    }
}
