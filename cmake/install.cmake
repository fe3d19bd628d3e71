# `cmake --install build [--prefix P]`, in two components that are two Debian packages:
#  - runtime (package hetps): the binaries in bin/, the dashboard in share/hetps/ (where
#    hetps-scheduler looks, <bin>/../share/hetps/dashboard), the Python package;
#  - dev (package hetps-dev): the client library, its public headers (include/hetps/: client.h
#    and what it includes, no generated protobuf header and no internal folder) and a CMake
#    package: find_package(hetps CONFIG) gives hetps::client.
include(CMakePackageConfigHelpers)

install(TARGETS hetps hetps-scheduler hetps-server hetps-worker hetps-aggregator RUNTIME DESTINATION bin
        COMPONENT runtime)
install(DIRECTORY ${CMAKE_BINARY_DIR}/share/hetps/dashboard DESTINATION share/hetps
        COMPONENT runtime)
# The daemons' systemd units (deploy/systemd/), the user they run as, and example flag files
# for /etc/hetps/ (the package ships none there: a host's role is the operator's choice).
install(FILES deploy/systemd/hetps-scheduler.service deploy/systemd/hetps-server@.service
              deploy/systemd/hetps-worker@.service deploy/systemd/hetps-aggregator.service
        DESTINATION lib/systemd/system COMPONENT runtime)
install(FILES deploy/systemd/hetps.sysusers DESTINATION lib/sysusers.d RENAME hetps.conf
        COMPONENT runtime)
install(FILES deploy/systemd/hetps.env deploy/systemd/scheduler.env deploy/systemd/server.env
              deploy/systemd/worker.env deploy/systemd/aggregator.env
        DESTINATION share/hetps/systemd COMPONENT runtime)

install(TARGETS hetps_client hetps_link hetps_common hetps_proto
        EXPORT hetpsTargets
        ARCHIVE DESTINATION lib COMPONENT dev)
# tests/install_test.sh checks that client.h compiles from these alone.
install(DIRECTORY include/hetps DESTINATION include COMPONENT dev)
install(EXPORT hetpsTargets NAMESPACE hetps:: DESTINATION lib/cmake/hetps COMPONENT dev)

configure_package_config_file(cmake/hetpsConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/cmake/hetpsConfig.cmake
                              INSTALL_DESTINATION lib/cmake/hetps)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/hetpsConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/hetpsConfig.cmake
              ${CMAKE_BINARY_DIR}/cmake/hetpsConfigVersion.cmake
        DESTINATION lib/cmake/hetps COMPONENT dev)

# `cpack -G DEB` (in the build folder): hetps_<version>_amd64.deb and hetps-dev_<version>_amd64.deb,
# installing under /usr. The runtime package's dependencies on Debian's runtime libraries come
# from dpkg-shlibdeps; hetps-dev needs the same version of hetps and the -dev packages that
# find_package(hetps) looks for (cmake/hetpsConfig.cmake.in).
set(CPACK_PACKAGE_NAME hetps)
set(CPACK_PACKAGE_CONTACT "hetps developers <hetps@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "parameter server for asynchronous and federated training")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME hetps)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${CMAKE_SOURCE_DIR}/deploy/systemd/postinst)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# The quickstart's data set and plots, and --links=netns.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_RECOMMENDS "dataset-fashion-mnist, gnuplot-nox, iproute2")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME hetps-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "hetps (= ${PROJECT_VERSION}), libprotobuf-dev, cppzmq-dev, libfmt-dev, libspdlog-dev, libeigen3-dev")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "hetps's client library: headers, static libraries and CMake package (hetps::client)")
include(CPack)
