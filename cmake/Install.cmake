# find_package(fabric_lib) and pkg-config support.
include(CMakePackageConfigHelpers)
install(TARGETS fabric_lib EXPORT fabric_libTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/fabric_lib DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT fabric_libTargets NAMESPACE fabric_lib:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fabric_lib)
configure_package_config_file(cmake/fabric_libConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/fabric_libConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fabric_lib)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/fabric_libConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/fabric_libConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/fabric_libConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fabric_lib)
# Relocatable: the prefix is found relative to the .pc file itself.
file(RELATIVE_PATH FABRIC_LIB_PC_TO_PREFIX "${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig" "${CMAKE_INSTALL_PREFIX}")
configure_file(cmake/fabric_lib.pc.in ${CMAKE_CURRENT_BINARY_DIR}/fabric_lib.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/fabric_lib.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
