# fabric_lib_bundle_app_library(MODULE LIBRARY COMPONENT): for wheels (setup.py sets
# FABRIC_LIB_PYTHON_BUNDLE_LIB), an application's shared library is installed into the fabric_lib
# package beside libfabric_lib.so.0, finding it there ($ORIGIN), and the app's extension module,
# one folder down (fabric_lib/<app>/), finds the library one folder up. Without bundling nothing
# changes: the library installs into the lib dir as usual.
function(fabric_lib_bundle_app_library module library component)
  if(NOT FABRIC_LIB_PYTHON_BUNDLE_LIB)
    return()
  endif()
  set_target_properties(${module} PROPERTIES INSTALL_RPATH "$ORIGIN/..")
  set_target_properties(${library} PROPERTIES INSTALL_RPATH "$ORIGIN")
  install(TARGETS ${library} LIBRARY DESTINATION ${FABRIC_LIB_PYTHON_INSTALL_DIR}/fabric_lib COMPONENT ${component} NAMELINK_SKIP)
endfunction()
