# `cmake --install build [--prefix P]`: the binaries in bin/, the dashboard in share/hetps/
# (where hetps-scheduler looks, <bin>/../share/hetps/dashboard), and the client library with its
# headers (include/hetps/) and a CMake package: find_package(hetps CONFIG) gives hetps::client.
include(CMakePackageConfigHelpers)

install(TARGETS hetps hetps-scheduler hetps-server hetps-worker RUNTIME DESTINATION bin)
install(DIRECTORY ${CMAKE_BINARY_DIR}/share/hetps/dashboard DESTINATION share/hetps)

install(TARGETS hetps_client hetps_link hetps_common hetps_proto
        EXPORT hetpsTargets
        ARCHIVE DESTINATION lib)
# client.h and what it includes (tests/install_test.sh checks the list is complete).
install(FILES worker/client.h worker/link_shaper.h DESTINATION include/hetps/worker)
install(FILES common/status.h common/shard_map.h DESTINATION include/hetps/common)
install(FILES ${CMAKE_BINARY_DIR}/proto/gen/hetps.pb.h DESTINATION include/hetps)
install(EXPORT hetpsTargets NAMESPACE hetps:: DESTINATION lib/cmake/hetps)

configure_package_config_file(cmake/hetpsConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/cmake/hetpsConfig.cmake
                              INSTALL_DESTINATION lib/cmake/hetps)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/hetpsConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/hetpsConfig.cmake
              ${CMAKE_BINARY_DIR}/cmake/hetpsConfigVersion.cmake
        DESTINATION lib/cmake/hetps)

# `cpack -G DEB` (in the build folder): hetps_<version>_amd64.deb, installing under /usr; its
# dependencies on Debian's runtime libraries come from dpkg-shlibdeps.
set(CPACK_PACKAGE_NAME hetps)
set(CPACK_PACKAGE_CONTACT "hetps developers <hetps@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "parameter server for asynchronous and federated training")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
# The quickstart's data set and plots, and --links=netns.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "dataset-fashion-mnist, gnuplot-nox, iproute2")
include(CPack)
