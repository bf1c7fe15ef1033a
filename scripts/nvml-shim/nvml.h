/* Stand-in for NVIDIA's nvml.h where the CUDA toolkit has none (it ships in a separate package).
 * scripts/libfabric.sh --cuda builds libfabric with --enable-cuda-dlopen, and then libfabric's
 * CUDA code needs only NVML's result type and its success value: it dlopens libnvidia-ml.so.1
 * and declares its own function pointers. Values as NVML's API reference gives them. */
#ifndef NNF_NVML_SHIM_H
#define NNF_NVML_SHIM_H

typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0
} nvmlReturn_t;

#endif
