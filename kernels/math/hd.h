// hd.h -- the one macro that lets per-element math be shared by the CPU
// backend (compiled by the host C++ compiler) and the CUDA kernels (nvcc).
#pragma once

#if defined(__CUDACC__)
#define AMPX_HD __host__ __device__ __forceinline__
#else
#define AMPX_HD inline
#endif
