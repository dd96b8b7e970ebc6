# Optional CUDA support (FABRIC_LIB_CUDA=AUTO|ON|OFF). AUTO turns it on when nvcc and the CUDA
# toolkit are found (PATH, CUDACXX, or /usr/local/cuda). With it on:
#   - the CUDA language is enabled for tests/device (kernels for sm_90 plus PTX),
#   - the library compiles src/gpu/'s CUDA parts, links the static CUDA runtime (so it loads, and
#     its CPU paths run, on machines without a driver), and is built with FABRIC_LIB_HAVE_CUDA=1.
# Sets FABRIC_LIB_HAVE_CUDA (ON/OFF) for the rest of the build.
set(FABRIC_LIB_HAVE_CUDA OFF)
if(FABRIC_LIB_CUDA STREQUAL "OFF")
  message(STATUS "fabric_lib: CUDA support off (FABRIC_LIB_CUDA=OFF)")
  return()
elseif(NOT FABRIC_LIB_CUDA STREQUAL "AUTO" AND NOT FABRIC_LIB_CUDA STREQUAL "ON")
  message(FATAL_ERROR "FABRIC_LIB_CUDA must be AUTO, ON or OFF (got '${FABRIC_LIB_CUDA}')")
endif()

# nvcc is often not on PATH (Debian's CI image, the GPU machine): look in the usual place.
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  find_program(_fl_nvcc nvcc)
  if(NOT _fl_nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
  endif()
endif()
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  if(NOT CUDAToolkit_ROOT)
    get_filename_component(_fl_cuda_bin "${CMAKE_CUDA_COMPILER}" DIRECTORY)
    get_filename_component(CUDAToolkit_ROOT "${_fl_cuda_bin}" DIRECTORY)
  endif()
  find_package(CUDAToolkit)
endif()
if(NOT CMAKE_CUDA_COMPILER OR NOT CUDAToolkit_FOUND)
  if(FABRIC_LIB_CUDA STREQUAL "ON")
    message(FATAL_ERROR "FABRIC_LIB_CUDA=ON but no CUDA compiler/toolkit was found (set CUDACXX or CMAKE_CUDA_COMPILER)")
  endif()
  message(STATUS "fabric_lib: CUDA support off (no nvcc / CUDA toolkit found)")
  return()
endif()

# Hopper (H100/H200) machine code, plus PTX so newer GPUs can JIT it.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90-real 90-virtual)
endif()
set(CMAKE_CUDA_STANDARD 17)  # kernels only: host logic stays in C++20 .cc files
set(CMAKE_CUDA_EXTENSIONS OFF)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
enable_language(CUDA)
set(FABRIC_LIB_HAVE_CUDA ON)
message(STATUS "fabric_lib: CUDA support on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, toolkit ${CUDAToolkit_VERSION}, "
               "architectures ${CMAKE_CUDA_ARCHITECTURES})")
