# Optional parts: each is AUTO (build when the dependency is found), ON (required) or OFF.
include_guard(GLOBAL)

function(meshwork_tristate name doc)
  set(${name} AUTO CACHE STRING "${doc} (AUTO, ON or OFF)")
  set_property(CACHE ${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${name}}" value)
  if(NOT value MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${name} must be AUTO, ON or OFF, not '${${name}}'")
  endif()
  set(${name} ${value} PARENT_SCOPE)
endfunction()

meshwork_tristate(MESHWORK_WITH_CUDA "Build the CUDA/NCCL executor backend and kernels")
meshwork_tristate(MESHWORK_WITH_QT "Build the Qt 6 GUI")
meshwork_tristate(MESHWORK_WITH_MPI "Build the MPI parts of the CPU executor")
meshwork_tristate(MESHWORK_WITH_SIMGRID "Build the discrete-event simulator (sim/)")
option(MESHWORK_FUZZ "Build libFuzzer targets (needs clang)" OFF)
# A machine with the CUDA toolkit and CMake but none of Debian's packages (the GPU machine):
# plan, models, kernels and the executor's CUDA backend, their tests and the GPU benchmark;
# header-only dependencies and GoogleTest's sources carried in MESHWORK_DEPS_DIR.
option(MESHWORK_GPU_ONLY "Build only what the GPU checks need (scripts/gpu-check)" OFF)
set(MESHWORK_DEPS_DIR "" CACHE PATH "Carried dependencies (scripts/gpu-deps): include/{nlohmann,eigen3}, googletest/")
if(MESHWORK_GPU_ONLY)
  set(MESHWORK_WITH_QT OFF)
  set(MESHWORK_WITH_MPI OFF)
  set(MESHWORK_WITH_SIMGRID OFF)
  if(MESHWORK_WITH_CUDA STREQUAL "AUTO")
    set(MESHWORK_WITH_CUDA ON)
  endif()
endif()

# A header-only dependency from MESHWORK_DEPS_DIR/include when its package is not installed:
# an imported INTERFACE target named `target` whose include directory holds `probe`.
function(meshwork_carried_headers target probe package)
  foreach(dir ${MESHWORK_DEPS_DIR}/include ${MESHWORK_DEPS_DIR}/include/eigen3)
    if(EXISTS ${dir}/${probe})
      add_library(${target} INTERFACE IMPORTED GLOBAL)
      set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${dir})
      set_target_properties(${target} PROPERTIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES ${dir})
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "${probe} not found: install ${package} (scripts/install-deps) or set MESHWORK_DEPS_DIR (scripts/gpu-deps)")
endfunction()

# Resolves one optional dependency: sets MESHWORK_HAVE_<what> to TRUE or FALSE.
macro(meshwork_resolve option what found)
  if(${option} STREQUAL "OFF")
    set(MESHWORK_HAVE_${what} FALSE)
  elseif(${found})
    set(MESHWORK_HAVE_${what} TRUE)
  elseif(${option} STREQUAL "ON")
    message(FATAL_ERROR "${option}=ON but ${what} was not found")
  else()
    set(MESHWORK_HAVE_${what} FALSE)
  endif()
endmacro()

if(NOT MESHWORK_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
endif()
set(_cuda_found FALSE)
if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
  set(_cuda_found TRUE)
endif()
meshwork_resolve(MESHWORK_WITH_CUDA CUDA _cuda_found)

if(NOT MESHWORK_WITH_QT STREQUAL "OFF")
  find_package(Qt6 QUIET COMPONENTS Widgets Charts Test Concurrent)
endif()
meshwork_resolve(MESHWORK_WITH_QT QT Qt6_FOUND)

if(NOT MESHWORK_WITH_MPI STREQUAL "OFF")
  find_package(MPI QUIET COMPONENTS CXX)
endif()
meshwork_resolve(MESHWORK_WITH_MPI MPI MPI_CXX_FOUND)

# Debian ships SimGrid's pkg-config file only (docs/reference/simgrid-3.32-notes.md).
if(NOT MESHWORK_WITH_SIMGRID STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(SimGrid QUIET IMPORTED_TARGET simgrid>=3.32)
  endif()
endif()
meshwork_resolve(MESHWORK_WITH_SIMGRID SIMGRID SimGrid_FOUND)

# The programs' allocator: jemalloc (Debian's libjemalloc-dev) where found, glibc's otherwise.
# SimGrid allocates and frees small objects for every flow (its activity lists' nodes, the
# max-min system's elements), and glibc's bins scatter them: the 16K-GPU plan's simulation
# runs about 1.5 times faster with jemalloc, in less memory (bench/RESULTS.md,
# "Speed"). Never with a sanitizer, which brings its own allocator.
meshwork_tristate(MESHWORK_WITH_JEMALLOC "Link the programs (meshwork, meshwork-gui, benchmarks) against jemalloc")
if(MESHWORK_GPU_ONLY)
  set(MESHWORK_WITH_JEMALLOC OFF)  # none of Debian's packages there
endif()
set(_sanitized FALSE)
string(TOUPPER "${CMAKE_BUILD_TYPE}" _build_type)
if("${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${_build_type}} ${CMAKE_EXE_LINKER_FLAGS}" MATCHES "-fsanitize")
  set(_sanitized TRUE)
  if(MESHWORK_WITH_JEMALLOC STREQUAL "ON")
    message(FATAL_ERROR "MESHWORK_WITH_JEMALLOC=ON with -fsanitize: a sanitizer replaces the allocator itself")
  endif()
endif()
set(jemalloc_FOUND FALSE)
if(NOT MESHWORK_WITH_JEMALLOC STREQUAL "OFF" AND NOT _sanitized)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(jemalloc QUIET IMPORTED_TARGET jemalloc)
  endif()
endif()
meshwork_resolve(MESHWORK_WITH_JEMALLOC JEMALLOC jemalloc_FOUND)
