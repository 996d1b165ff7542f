# Installs the headers and exports weft::weft (and weft::mpi / weft::cuda / weft::nccl / weft::zmq
# where they exist) so that find_package(weft CONFIG REQUIRED) works for users.
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/weft DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS weft EXPORT weft-targets)
install(EXPORT weft-targets NAMESPACE weft:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
if(WEFT_HAS_MPI)
    install(TARGETS weft_mpi EXPORT weft-mpi-targets)
    install(EXPORT weft-mpi-targets NAMESPACE weft:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
endif()
if(WEFT_HAS_CUDA)
    install(TARGETS weft_cuda weft_cuda_backend EXPORT weft-cuda-targets)
    install(EXPORT weft-cuda-targets NAMESPACE weft:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
endif()
# weft::nccl records the NCCL library and include directory found here.
if(WEFT_HAS_NCCL)
    install(TARGETS weft_nccl EXPORT weft-nccl-targets)
    install(EXPORT weft-nccl-targets NAMESPACE weft:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
endif()

# weft::zmq records the ZeroMQ library and include directory found here.
if(WEFT_HAS_ZMQ)
    install(TARGETS weft_zmq EXPORT weft-zmq-targets)
    install(EXPORT weft-zmq-targets NAMESPACE weft:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
endif()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/weftConfig.cmake.in
    ${PROJECT_BINARY_DIR}/weftConfig.cmake
    INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/weftConfigVersion.cmake
    COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${PROJECT_BINARY_DIR}/weftConfig.cmake ${PROJECT_BINARY_DIR}/weftConfigVersion.cmake
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
