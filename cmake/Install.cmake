# Install layout: <prefix>/lib holds the plugin and the alias NCCL looks for by default,
# <prefix>/bin the tools (which find the plugin as ../lib relative to themselves),
# <prefix>/share/doc/nccl-net-fabric the documentation.
include(GNUInstallDirs)
set(NNF_INSTALL_LIBDIR lib CACHE STRING
  "Plugin directory relative to the prefix (put it on LD_LIBRARY_PATH unless it is a system one)")
set(NNF_INSTALL_DOCDIR ${CMAKE_INSTALL_DATAROOTDIR}/doc/nccl-net-fabric)
