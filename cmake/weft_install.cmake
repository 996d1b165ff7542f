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

# weft.pc for pkg-config, in share/ as weft is the same on every architecture. Its paths are
# relative to where it is installed (pkg-config's ${pcfiledir}), so cmake --install --prefix
# anywhere gives a working file.
set(weft_pc_dir ${CMAKE_INSTALL_DATADIR}/pkgconfig)
file(RELATIVE_PATH WEFT_PC_PREFIX_FROM_PCFILEDIR /${weft_pc_dir} /)
string(REGEX REPLACE "/$" "" WEFT_PC_PREFIX_FROM_PCFILEDIR "${WEFT_PC_PREFIX_FROM_PCFILEDIR}")
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(WEFT_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
    set(WEFT_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(WEFT_PC_EIGEN_ISYSTEM)
get_target_property(weft_eigen_includes Eigen3::Eigen INTERFACE_INCLUDE_DIRECTORIES)
foreach(dir IN LISTS weft_eigen_includes)
    if(IS_ABSOLUTE "${dir}")
        string(APPEND WEFT_PC_EIGEN_ISYSTEM " -isystem ${dir}")
    endif()
endforeach()
string(STRIP "${WEFT_PC_EIGEN_ISYSTEM}" WEFT_PC_EIGEN_ISYSTEM)
configure_file(${PROJECT_SOURCE_DIR}/cmake/weft.pc.in ${PROJECT_BINARY_DIR}/weft.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/weft.pc DESTINATION ${weft_pc_dir})
