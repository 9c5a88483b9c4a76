# Installs the headers, the exported INTERFACE target pipeprop::pipeprop and a package config + version file,
# so that downstream projects can call find_package(pipeprop CONFIG REQUIRED).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS pipeprop EXPORT pipeprop-targets)
install(DIRECTORY include/pipeprop DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT pipeprop-targets NAMESPACE pipeprop:: DESTINATION ${CMAKE_INSTALL_DATADIR}/pipeprop/cmake)

configure_package_config_file(cmake/pipeprop-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/pipeprop-config.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_DATADIR}/pipeprop/cmake)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/pipeprop-config-version.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/pipeprop-config.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/pipeprop-config-version.cmake
  cmake/pipeprop-dependencies.cmake
  DESTINATION ${CMAKE_INSTALL_DATADIR}/pipeprop/cmake)
