//! Data parallelism in one process: communicators that cannot be made here
//! are refused with the library's reason, NCCL ids, and the options. The
//! training runs over several ranks are tests/data_parallel_mpi.rs, which
//! run_tests.sh runs under mpirun.
use std::ffi::c_void;
use std::path::PathBuf;
use std::ptr;

use ampx::dist::{nccl_unique_id, NCCL_UNIQUE_ID_BYTES};
use ampx::{Communicator, Context, DataParallelOptions, Status};

#[test]
fn nccl_ids_are_fresh_or_nccl_is_missing() {
    match (nccl_unique_id(), nccl_unique_id()) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.len(), NCCL_UNIQUE_ID_BYTES);
            assert_eq!(NCCL_UNIQUE_ID_BYTES, 128);
            assert!(a.iter().any(|&x| x != 0), "an id is not all zero");
            assert_ne!(a, b, "each id is new");
        }
        (Err(e), _) | (_, Err(e)) => {
            assert_eq!(e.status(), Status::NotSupported, "{e}");
            assert!(e.message().contains("NCCL") || e.message().contains("nccl"), "{e}");
        }
    }
}

#[test]
fn nccl_communicators_need_a_cuda_context() {
    let ctx = Context::new().unwrap();
    let id = [0u8; NCCL_UNIQUE_ID_BYTES];
    let e = Communicator::init_nccl(&ctx, &id, 1, 0).unwrap_err();
    assert_eq!(e.status(), Status::NotSupported);
    assert!(e.message().contains("ampx_comm_init_nccl") && e.message().contains("CPU"), "{e}");
    let e = Communicator::init_nccl(&ctx, b"short", 1, 0).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("128"), "{e}");
    let e = Communicator::init_nccl(&ctx, &id, usize::MAX, 0).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("world_size"), "{e}");
    // SAFETY: the library refuses a CPU context before it looks at the pointer.
    let e = unsafe { Communicator::from_nccl(&ctx, 0x1000 as *mut c_void) }.unwrap_err();
    assert_eq!(e.status(), Status::NotSupported);
    assert!(e.message().contains("ampx_comm_from_nccl"), "{e}");
}

#[test]
fn an_mpi_communicator_needs_mpi_initialised() {
    let ctx = Context::new().unwrap();
    // SAFETY: NULL is refused by the library.
    let e = unsafe { Communicator::from_mpi(&ctx, ptr::null()) }.unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("mpi_comm"), "{e}");
    // MPI is not initialised in this process: refused before the
    // communicator is read (the plugin is missing where ampx has no MPI).
    let comm: *const c_void = ptr::null();
    // SAFETY: points to a variable; not read while MPI is not initialised.
    let e = unsafe { Communicator::from_mpi(&ctx, ptr::addr_of!(comm).cast()) }.unwrap_err();
    let plugin = std::env::var_os("AMPX_LIB_DIR").map(|d| PathBuf::from(d).join("libampx_mpi.so"));
    if plugin.map_or(false, |p| p.exists()) {
        assert_eq!(e.status(), Status::InvalidArgument, "{e}");
        assert!(e.message().contains("not initialized"), "{e}");
    } else {
        assert_eq!(e.status(), Status::NotSupported, "{e}");
    }
}

#[test]
fn data_parallel_defaults_are_the_libraries() {
    let o = DataParallelOptions::default();
    assert_eq!((o.bucket_bytes, o.first_bucket_bytes), (25 << 20, 1 << 20));
    assert_eq!((o.average, o.reduce_in_fp32, o.overlap, o.zero_stage), (true, false, true, 0));
}
