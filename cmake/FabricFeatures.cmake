# Feature checks against the libfabric headers we build with (Debian ships 1.17, AWS 2.x):
# decide by what the headers declare, never by version numbers.
include(CheckCSourceCompiles)
include(CMakePushCheckState)

cmake_push_check_state(RESET)
set(CMAKE_REQUIRED_INCLUDES ${FABRIC_INCLUDE_DIRS})
check_c_source_compiles("
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
int main(void) { struct fi_mr_attr a; a.dmabuf = 0; return (int)FI_MR_DMABUF; }"
  NNF_HAVE_FI_MR_DMABUF)
check_c_source_compiles("
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
int main(void) { struct fi_mr_attr a; a.iface = FI_HMEM_CUDA; a.device.cuda = 0; return (int)FI_HMEM; }"
  NNF_HAVE_FI_HMEM)
check_c_source_compiles("
#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>
int main(void) { return (int)FI_OPT_CUDA_API_PERMITTED; }"
  NNF_HAVE_FI_OPT_CUDA_API_PERMITTED)
check_c_source_compiles("
#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>
int main(void) { return (int)FI_OPT_SHARED_MEMORY_PERMITTED; }"
  NNF_HAVE_FI_OPT_SHARED_MEMORY_PERMITTED)
check_c_source_compiles("
#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_ext.h>
int main(void) { return (int)FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES; }"
  NNF_HAVE_FI_OPT_EFA_IN_ORDER_ALIGNED_128)
cmake_pop_check_state()

# The plugin carries the option numbers itself (src/platform/provider_rules.h); where the headers
# declare them too, a static_assert checks that both agree.
foreach(feature NNF_HAVE_FI_MR_DMABUF NNF_HAVE_FI_HMEM NNF_HAVE_FI_OPT_CUDA_API_PERMITTED
        NNF_HAVE_FI_OPT_SHARED_MEMORY_PERMITTED NNF_HAVE_FI_OPT_EFA_IN_ORDER_ALIGNED_128)
  if(${feature})
    list(APPEND NNF_FEATURE_DEFINITIONS ${feature}=1)
  else()
    list(APPEND NNF_FEATURE_DEFINITIONS ${feature}=0)
  endif()
endforeach()
message(STATUS "libfabric ${FABRIC_VERSION}: FI_MR_DMABUF=${NNF_HAVE_FI_MR_DMABUF} "
               "FI_HMEM=${NNF_HAVE_FI_HMEM} "
               "FI_OPT_CUDA_API_PERMITTED=${NNF_HAVE_FI_OPT_CUDA_API_PERMITTED} "
               "EFA in-order options=${NNF_HAVE_FI_OPT_EFA_IN_ORDER_ALIGNED_128}")
