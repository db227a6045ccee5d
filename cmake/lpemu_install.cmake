# `cmake --install`: the library, public headers, the `lpemu` command, shipped models and plans,
# the Python package and a CMake package (lpemuConfig.cmake, version file, exported targets).
include(CMakePackageConfigHelpers)
set(LPEMU_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/lpemu" CACHE STRING "Install folder of lpemuConfig.cmake")

set_target_properties(lpemu_cli PROPERTIES EXPORT_NAME lpemu_cli)
# The layers (lpemu::common ... lpemu::experiment, one archive each) and lpemu::lpemu over them all.
list(TRANSFORM LPEMU_LAYERS PREPEND lpemu_ OUTPUT_VARIABLE _lpemu_layer_targets)
install(TARGETS lpemu ${_lpemu_layer_targets} lpemu_cli EXPORT lpemuTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/lpemu" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Shipped models and plans: the installed `lpemu` looks for them in PREFIX/share/lpemu.
install(DIRECTORY "${PROJECT_SOURCE_DIR}/data/models" DESTINATION ${CMAKE_INSTALL_DATADIR}/lpemu/data)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/experiments/plans" DESTINATION ${CMAKE_INSTALL_DATADIR}/lpemu/experiments)
install(EXPORT lpemuTargets NAMESPACE lpemu:: DESTINATION ${LPEMU_CMAKE_DIR})
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/lpemuConfig.cmake.in"
                              "${PROJECT_BINARY_DIR}/lpemuConfig.cmake" INSTALL_DESTINATION ${LPEMU_CMAKE_DIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/lpemuConfigVersion.cmake" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/lpemuConfig.cmake" "${PROJECT_BINARY_DIR}/lpemuConfigVersion.cmake"
        DESTINATION ${LPEMU_CMAKE_DIR})
