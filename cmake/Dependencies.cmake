# Every dependency comes from Debian's packages (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBFABRIC REQUIRED IMPORTED_TARGET libfabric>=1.17)
find_package(spdlog REQUIRED)
find_path(CONCURRENTQUEUE_INCLUDE_DIR concurrentqueue/concurrentqueue.h REQUIRED)

# The Prometheus pull endpoint (src/exporter/, TransferEngineBuilder::metrics_endpoint) through
# Debian's prometheus-cpp-dev (core + pull, whose HTTP server is civetweb). AUTO: built when
# found; OFF, or not found: the library builds without it and metrics_endpoint() is Unsupported
# (TransferEngine::metrics() works either way).
set(FABRIC_LIB_METRICS_EXPORTER AUTO CACHE STRING "Prometheus endpoint through prometheus-cpp: AUTO (when found), ON, OFF")
set_property(CACHE FABRIC_LIB_METRICS_EXPORTER PROPERTY STRINGS AUTO ON OFF)
set(FABRIC_LIB_HAVE_PROMETHEUS OFF)
if(NOT FABRIC_LIB_METRICS_EXPORTER STREQUAL "OFF")
  find_package(prometheus-cpp CONFIG QUIET COMPONENTS core pull)
  if(TARGET prometheus-cpp::pull)
    set(FABRIC_LIB_HAVE_PROMETHEUS ON)
    message(STATUS "fabric-lib: Prometheus endpoint on (prometheus-cpp ${prometheus-cpp_VERSION})")
  elseif(FABRIC_LIB_METRICS_EXPORTER STREQUAL "ON")
    message(FATAL_ERROR "FABRIC_LIB_METRICS_EXPORTER=ON but prometheus-cpp (core + pull) was not found: "
                        "apt-get install prometheus-cpp-dev (scripts/install-deps.sh)")
  else()
    message(STATUS "fabric-lib: Prometheus endpoint off: prometheus-cpp not found (apt-get install prometheus-cpp-dev); "
                   "TransferEngine::metrics() still works, metrics_endpoint() returns Unsupported")
  endif()
else()
  message(STATUS "fabric-lib: Prometheus endpoint off (FABRIC_LIB_METRICS_EXPORTER=OFF)")
endif()
