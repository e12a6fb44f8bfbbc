// library_types.h (CUDA emulator) -- the element types the CUDA math
// libraries share, as far as ampx's CUDA backend names them (cuBLASLt's
// matrix, scale and bias types). Names and numeric values are those of the
// CUDA toolkit, so a value printed in a log reads the same as on a GPU.
#pragma once

typedef enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14,
  CUDA_R_8F_E4M3 = 28,
  CUDA_R_8F_E5M2 = 29,
} cudaDataType;
