# One CMake library per folder of src/, each seeing only the folders below it (DESIGN.md section 2,
# docs/architecture.md). A layer's include root (build/layers/<target>/) holds links to its own
# headers only — src/<dir>/*.h, not its subfolders — and to the public headers it owns; a layer
# sees the roots of the layers it links, and nothing else. An include that runs the wrong way
# (core including a backend, a backend including another, transport including core) therefore
# fails to compile: there is no path under which the header could be found.
#
#   fabric_layer(<target> DIR <src subdir> [SOURCES ...] [PUBLIC_HEADERS <include/fabric_lib names>]
#                [LINK <layers and external targets>])
# Without SOURCES the layer is header-only (an INTERFACE library).
function(fabric_layer target)
  cmake_parse_arguments(L "" "DIR" "SOURCES;PUBLIC_HEADERS;LINK" ${ARGN})
  set(root ${PROJECT_BINARY_DIR}/layers/${target})
  file(REMOVE_RECURSE ${root})
  file(GLOB headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${L_DIR}/*.h)
  foreach(h IN LISTS headers)
    get_filename_component(name ${h} NAME)
    file(MAKE_DIRECTORY ${root}/${L_DIR})
    file(CREATE_LINK ${h} ${root}/${L_DIR}/${name} SYMBOLIC)
  endforeach()
  foreach(name IN LISTS L_PUBLIC_HEADERS)
    if(NOT EXISTS ${PROJECT_SOURCE_DIR}/include/fabric_lib/${name})
      message(FATAL_ERROR "fabric_layer(${target}): no public header include/fabric_lib/${name}")
    endif()
    file(MAKE_DIRECTORY ${root}/fabric_lib)
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/fabric_lib/${name} ${root}/fabric_lib/${name} SYMBOLIC)
  endforeach()
  set(sources "")
  foreach(src IN LISTS L_SOURCES)
    list(APPEND sources ${PROJECT_SOURCE_DIR}/src/${L_DIR}/${src})
  endforeach()
  if(sources)
    add_library(${target} OBJECT ${sources})
    target_include_directories(${target} PUBLIC ${root})
    target_link_libraries(${target} PUBLIC ${L_LINK})
  else()
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE ${root})
    target_link_libraries(${target} INTERFACE ${L_LINK})
  endif()
endfunction()
