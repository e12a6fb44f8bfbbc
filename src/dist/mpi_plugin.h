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

#define AMPX_MPI_PLUGIN_ABI 1

enum ampx_mpi_op { AMPX_MPI_SUM = 0, AMPX_MPI_MAX = 1, AMPX_MPI_MIN = 2 };

typedef struct ampx_mpi_plugin {
  uint32_t abi; /* AMPX_MPI_PLUGIN_ABI */
  /* Duplicates the host's communicator (*(const MPI_Comm *)host_comm), so
   * ampx's messages never match the host's. Collective over its ranks. */
  int (*open)(const void* host_comm, void** comm, int32_t* rank, int32_t* size, char* err,
              size_t err_bytes);
  /* Waits for started operations, then frees the duplicate. */
  void (*close)(void* comm);
  /* In place over every rank. start: begin a non-blocking reduction that
   * finish() completes (progress() advances it); otherwise done on return. */
  int (*all_reduce)(void* comm, void* data, int64_t count, int32_t dtype, int32_t op, int32_t start,
                    char* err, size_t err_bytes);
  int (*broadcast)(void* comm, void* data, size_t bytes, int32_t root, char* err, size_t err_bytes);
  /* recv[r * bytes ...] = rank r's send; send may be recv + rank * bytes
   * (in place). */
  int (*all_gather)(void* comm, const void* send, void* recv, size_t bytes, char* err,
                    size_t err_bytes);
  /* recv[0..count) = the reduction over ranks of their send[rank * count,
   * (rank + 1) * count); send holds size * count elements. start: as for
   * all_reduce. */
  int (*reduce_scatter)(void* comm, const void* send, void* recv, int64_t count, int32_t dtype,
                        int32_t op, int32_t start, char* err, size_t err_bytes);
  /* Lets started operations advance without waiting for them. */
  int (*progress)(void* comm, char* err, size_t err_bytes);
  /* Waits until every started operation has completed. */
  int (*finish)(void* comm, char* err, size_t err_bytes);
  /* The MPI library's own version string ("Open MPI v4.1.4, ..."). */
  const char* (*library_version)(void);
} ampx_mpi_plugin;

typedef const ampx_mpi_plugin* (*ampx_mpi_plugin_entry)(void);

#ifdef __cplusplus
}
#endif

#endif
