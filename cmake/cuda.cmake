# The CUDA backend (src/backend/cuda): built whenever nvcc is found (CI has nvcc but no GPU, so it
# compiles there and its tests skip). Without nvcc, or with -DCERA_CUDA=OFF, cera_backend_cuda is a
# stub whose factory says the binary was built without CUDA.
include(CheckLanguage)
set(CERA_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (when nvcc is found), ON, OFF")
set_property(CACHE CERA_CUDA PROPERTY STRINGS AUTO ON OFF)
if(NOT CERA_CUDA STREQUAL "OFF")
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND CERA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "CERA_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()

if(CMAKE_CUDA_COMPILER AND NOT CERA_CUDA STREQUAL "OFF")
  # Architectures are given as -gencode below: Hopper machine code (sm_90a, for wgmma) plus compute_80
  # PTX that any newer GPU's driver compiles at load time.
  set(CMAKE_CUDA_ARCHITECTURES OFF)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(CERA_CUDA_GENCODE "-gencode=arch=compute_90a,code=sm_90a;-gencode=arch=compute_80,code=compute_80"
      CACHE STRING "nvcc -gencode flags for the CUDA backend")
  file(GLOB cuda_srcs CONFIGURE_DEPENDS "${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu"
                                        "${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cpp")
  add_library(cera_backend_cuda STATIC ${cuda_srcs})
  target_include_directories(cera_backend_cuda PUBLIC ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
  # Device code is C++17: CMake 3.25 does not know nvcc 13's C++20 flag (host .cpp files stay C++20).
  set_target_properties(cera_backend_cuda PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
  target_compile_options(cera_backend_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:${CERA_CUDA_GENCODE} --expt-relaxed-constexpr -Xcompiler=-Wall -Wno-deprecated-gpu-targets>)
  # cudart static: a binary that finds no driver (CI) still starts and reports "no device".
  # cuBLAS dynamic: its static archive is hundreds of MB.
  # cera_backend_cpu: its RoPE frequency functions (one definition of the angles for both backends).
  target_link_libraries(cera_backend_cuda PUBLIC cera_format cera_backend_cpu CUDA::cudart_static CUDA::cublas
                                                 CUDA::cublasLt)
  target_compile_definitions(cera_backend_cuda PUBLIC CERA_HAVE_CUDA=1)
  # Per-block kernel timestamps for tools/device/trace_step.py (src/backend/cuda/trace.h); off in
  # every normal build.
  option(CERA_CUDA_TRACE "Record per-block kernel start/wait times (CERA_CUDA_TRACE_FILE)" OFF)
  if(CERA_CUDA_TRACE)
    target_compile_definitions(cera_backend_cuda PUBLIC CERA_CUDA_TRACE=1)
  endif()
  set(CERA_HAVE_CUDA ON)
else()
  add_library(cera_backend_cuda STATIC ${CMAKE_SOURCE_DIR}/src/backend/cuda_absent.cpp)
  target_include_directories(cera_backend_cuda PUBLIC ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(cera_backend_cuda PUBLIC cera_format)
  set(CERA_HAVE_CUDA OFF)
endif()
