# install.cmake — what `cmake --install BUILD --prefix PREFIX` puts where
# (docs/embedding.md, "Installing"):
#   PREFIX/bin/baspc, basp-opt              the compiler drivers
#   PREFIX/lib/libbasp.so                   the embedding API (api/basp.h)
#   PREFIX/include/basp/basp.h, basp_pass.h,  its headers (the pass-writer API too)
#                       basp_rt.h           and the runtime's
#   PREFIX/lib/basp/                        the runtime generated programs link:
#       libbasp_rt.a, libbasp_kernels.a,    (libbasp_rt_cuda.a with the CUDA
#       include/basp_rt.h                   backend), laid out as BASP_RUNTIME_DIR;
#                                           an installed baspc finds it there
#   PREFIX/lib/cmake/basp/                  find_package(basp): basp::basp, basp::rt, basp::plugin,
#                                           BASP_BASPC, BASP_RUNTIME_DIR
#   PREFIX/lib/pkgconfig/basp.pc            pkg-config --cflags --libs basp
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS baspc basp-opt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS basp_shared EXPORT basp-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/basp)
install(FILES ${CMAKE_SOURCE_DIR}/api/basp.h ${CMAKE_SOURCE_DIR}/api/basp_pass.h
        ${CMAKE_SOURCE_DIR}/runtime/include/basp_rt.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/basp)

set(BASP_RT_DEST ${CMAKE_INSTALL_LIBDIR}/basp)
if(TARGET basp_rt AND TARGET basp_kernels)
  install(FILES $<TARGET_FILE:basp_rt> $<TARGET_FILE:basp_kernels> DESTINATION ${BASP_RT_DEST})
endif()
if(TARGET basp_rt_cuda)
  install(FILES $<TARGET_FILE:basp_rt_cuda> DESTINATION ${BASP_RT_DEST})
endif()
install(FILES ${CMAKE_SOURCE_DIR}/runtime/include/basp_rt.h DESTINATION ${BASP_RT_DEST}/include)

install(EXPORT basp-targets NAMESPACE basp:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/basp)
# The runtime's link line as configured here (MPI, cJSON, OpenBLAS found on
# this machine), for basp::rt.
set(BASP_RT_LINK "${CJSON_LIBRARY};${BLAS_LIBRARY};m")
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/basp-config.cmake.in
                              ${CMAKE_BINARY_DIR}/cmake/basp-config.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/basp
                              PATH_VARS CMAKE_INSTALL_BINDIR BASP_RT_DEST CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/basp-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/basp-config.cmake ${CMAKE_BINARY_DIR}/cmake/basp-config-version.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/basp)

configure_file(${CMAKE_SOURCE_DIR}/cmake/basp.pc.in ${CMAKE_BINARY_DIR}/cmake/basp.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/cmake/basp.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
