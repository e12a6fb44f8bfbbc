/* mpi_plugin.h -- the table of functions through which libampx uses MPI.
 *
 * MPI's handles and constants differ between implementations (a pointer in
 * Open MPI, an int in MPICH), so code that names them must be compiled
 * against the host's mpi.h. That code lives in a plugin, libampx_mpi.so,
 * built with the MPI found at build time and loaded (dlopen) the first time
 * a program makes a communicator from an MPI_Comm; libampx itself never
 * links MPI, and loads and runs where MPI is absent. The plugin exports one
 * function, ampx_mpi_plugin_v1, returning this table.
 *
 * Every function returns 0 on success; otherwise it writes a message (NUL
 * terminated, at most err_bytes) into err and returns non-zero. Element
 * types are ampx_dtype values; ops are enum ampx_mpi_op. */
#ifndef AMPX_DIST_MPI_PLUGIN_H
#define AMPX_DIST_MPI_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: every collective only starts (MPI's nonblocking calls) and wait()
 * completes them against a deadline, so a host wait can time out. */
#define AMPX_MPI_PLUGIN_ABI 2

enum ampx_mpi_op { AMPX_MPI_SUM = 0, AMPX_MPI_MAX = 1, AMPX_MPI_MIN = 2 };

/* What wait() answers besides 0. */
enum ampx_mpi_wait { AMPX_MPI_FAILED = 1, AMPX_MPI_TIMED_OUT = 2 };

typedef struct ampx_mpi_plugin {
  uint32_t abi; /* AMPX_MPI_PLUGIN_ABI */
  /* Duplicates the host's communicator (*(const MPI_Comm *)host_comm), so
   * ampx's messages never match the host's. Collective over its ranks. */
  int (*open)(const void* host_comm, void** comm, int32_t* rank, int32_t* size, char* err,
              size_t err_bytes);
  /* Frees the duplicate once its started operations have completed; after
   * abandon() it frees nothing (see there). */
  void (*close)(void* comm);
  /* The collectives below only start their operation (MPI_Iallreduce, ...);
   * wait() completes it. Their memory must stay untouched until then. */
  /* In place over every rank. */
  int (*all_reduce)(void* comm, void* data, int64_t count, int32_t dtype, int32_t op, char* err,
                    size_t err_bytes);
  int (*broadcast)(void* comm, void* data, size_t bytes, int32_t root, char* err, size_t err_bytes);
  /* recv[r * bytes ...] = rank r's send; send may be recv + rank * bytes
   * (in place). */
  int (*all_gather)(void* comm, const void* send, void* recv, size_t bytes, char* err,
                    size_t err_bytes);
  /* recv[0..count) = the reduction over ranks of their send[rank * count,
   * (rank + 1) * count); send holds size * count elements. */
  int (*reduce_scatter)(void* comm, const void* send, void* recv, int64_t count, int32_t dtype,
                        int32_t op, char* err, size_t err_bytes);
  /* Lets started operations advance without waiting for them. */
  int (*progress)(void* comm, char* err, size_t err_bytes);
  /* Polls the started operations until all have completed (0), one failed
   * (AMPX_MPI_FAILED, with a message), or `seconds` have passed
   * (AMPX_MPI_TIMED_OUT; they are still pending then). */
  int (*wait)(void* comm, double seconds, char* err, size_t err_bytes);
  /* Gives up the pending operations: MPI can neither cancel a collective
   * nor (Open MPI 4.1) revoke a communicator, so their requests and the
   * duplicate are kept, never waited for or freed, until the process
   * ends; the caller must keep their memory as long. */
  void (*abandon)(void* comm);
  /* The MPI library's own version string ("Open MPI v4.1.4, ..."). */
  const char* (*library_version)(void);
} ampx_mpi_plugin;

typedef const ampx_mpi_plugin* (*ampx_mpi_plugin_entry)(void);

#ifdef __cplusplus
}
#endif

#endif
