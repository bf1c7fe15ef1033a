# CUDA is never linked: the driver is loaded with dlopen at run time. Headers are not needed
# either (we declare the few driver entry points we use), so nothing here is required.
set(NNF_CUDA_LIBRARY_NAME "libcuda.so.1" CACHE STRING "CUDA driver library loaded at run time")
