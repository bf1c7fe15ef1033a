# Which libfabric to build against. Empty LIBFABRIC_ROOT: the system's (Debian 12: 1.17, found by
# pkg-config). A prefix (the EFA installer's /opt/amazon/efa, or scripts/libfabric.sh's
# /opt/nnf-deps/libfabric-2.1.0): that prefix's libfabric.pc is searched first, and every binary
# gets a run path to its lib directory, so the plugin, tools and tests load that libfabric at run
# time and not the system's (both are libfabric.so.1; LD_LIBRARY_PATH still wins over a RUNPATH).
set(LIBFABRIC_ROOT "" CACHE PATH
  "libfabric install prefix to build against (e.g. /opt/amazon/efa); empty: the system's")

# A changed root in an existing build folder: forget the previous lookup and feature checks.
if(DEFINED NNF_LIBFABRIC_ROOT_USED AND NOT NNF_LIBFABRIC_ROOT_USED STREQUAL LIBFABRIC_ROOT)
  unset(__pkg_config_checked_FABRIC CACHE)
  unset(FABRIC_FOUND CACHE)
  unset(NNF_FABRIC_LIBRARY CACHE)
  # FabricFeatures.cmake's results (NNF_HAVE_*) described the other libfabric's headers.
  get_cmake_property(_nnf_cached CACHE_VARIABLES)
  foreach(variable ${_nnf_cached})
    if(variable MATCHES "^NNF_HAVE_")
      unset(${variable} CACHE)
    endif()
  endforeach()
endif()
set(NNF_LIBFABRIC_ROOT_USED "${LIBFABRIC_ROOT}" CACHE INTERNAL "")

if(LIBFABRIC_ROOT)
  if(NOT EXISTS "${LIBFABRIC_ROOT}/include/rdma/fabric.h")
    message(FATAL_ERROR "LIBFABRIC_ROOT=${LIBFABRIC_ROOT}: no include/rdma/fabric.h there")
  endif()
  set(_nnf_pc_dirs "")
  foreach(libdir lib lib64)
    if(EXISTS "${LIBFABRIC_ROOT}/${libdir}/pkgconfig/libfabric.pc")
      list(APPEND _nnf_pc_dirs "${LIBFABRIC_ROOT}/${libdir}/pkgconfig")
    endif()
  endforeach()
  if(_nnf_pc_dirs)
    string(REPLACE ";" ":" _nnf_pc_path "${_nnf_pc_dirs}")
    set(ENV{PKG_CONFIG_PATH} "${_nnf_pc_path}:$ENV{PKG_CONFIG_PATH}")
    pkg_check_modules(FABRIC REQUIRED IMPORTED_TARGET libfabric)
  else()
    # A prefix without a .pc file: the library and headers themselves, as pkg-config would give.
    find_library(NNF_FABRIC_LIBRARY fabric PATHS "${LIBFABRIC_ROOT}/lib" "${LIBFABRIC_ROOT}/lib64"
      NO_DEFAULT_PATH REQUIRED)
    get_filename_component(FABRIC_LIBDIR "${NNF_FABRIC_LIBRARY}" DIRECTORY)
    set(FABRIC_INCLUDE_DIRS "${LIBFABRIC_ROOT}/include")
    file(STRINGS "${LIBFABRIC_ROOT}/include/rdma/fabric.h" _nnf_version_lines
      REGEX "#define FI_(MAJOR|MINOR)_VERSION")
    string(REGEX REPLACE ".*FI_MAJOR_VERSION[ \t]+([0-9]+).*" "\\1" _nnf_major "${_nnf_version_lines}")
    string(REGEX REPLACE ".*FI_MINOR_VERSION[ \t]+([0-9]+).*" "\\1" _nnf_minor "${_nnf_version_lines}")
    set(FABRIC_VERSION "${_nnf_major}.${_nnf_minor} (fabric.h)")
    add_library(PkgConfig::FABRIC INTERFACE IMPORTED)
    target_include_directories(PkgConfig::FABRIC INTERFACE "${FABRIC_INCLUDE_DIRS}")
    target_link_libraries(PkgConfig::FABRIC INTERFACE "${NNF_FABRIC_LIBRARY}")
  endif()
  # The lookup must have landed in the prefix asked for, not on the system's libfabric.
  get_filename_component(_nnf_root_real "${LIBFABRIC_ROOT}" REALPATH)
  get_filename_component(_nnf_libdir_real "${FABRIC_LIBDIR}" REALPATH)
  string(FIND "${_nnf_libdir_real}/" "${_nnf_root_real}/" _nnf_at)
  if(NOT _nnf_at EQUAL 0)
    message(FATAL_ERROR "LIBFABRIC_ROOT=${LIBFABRIC_ROOT} but libfabric was found in ${FABRIC_LIBDIR}")
  endif()
  # Build-tree binaries get this through their full link path already; installed ones need it.
  list(APPEND CMAKE_BUILD_RPATH "${FABRIC_LIBDIR}")
  list(APPEND CMAKE_INSTALL_RPATH "${FABRIC_LIBDIR}")
else()
  pkg_check_modules(FABRIC REQUIRED IMPORTED_TARGET libfabric)
  if(NOT FABRIC_LIBDIR)
    pkg_get_variable(FABRIC_LIBDIR libfabric libdir)
  endif()
endif()
message(STATUS "libfabric ${FABRIC_VERSION} from ${FABRIC_LIBDIR}"
  " (LIBFABRIC_ROOT=${LIBFABRIC_ROOT})")
