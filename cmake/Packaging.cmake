# `cpack -G DEB` in the build tree: a Debian package installing into /usr, so that the plugin and
# its alias land on the default library path and NCCL finds libnccl-net.so with no settings.
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/LICENSE
  DESTINATION ${NNF_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${NNF_INSTALL_DOCDIR}
  FILES_MATCHING PATTERN "*.md" PATTERN "*.png" PATTERN "*.svg")

set(CPACK_PACKAGE_NAME nccl-net-fabric)
set(CPACK_PACKAGE_VENDOR "nccl-net-fabric")
set(CPACK_PACKAGE_CONTACT "nccl-net-fabric maintainers <nccl-net-fabric@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "NCCL network plugin over libfabric (EFA, tcp, shm)")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
# Library dependencies (libfabric, hwloc, libstdc++) computed from the binaries.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_GENERATOR DEB)
include(CPack)
