# Debian packages with CPack (included at the end of the top-level
# CMakeLists.txt). `cpack -G DEB` in a build directory, or
# `cmake --build build --target package`, writes
#   libampx0      the shared library (libampx.so.0*)
#   libampx-mpi0  the MPI plugin libampx loads at run time (when MPI was found)
#   libampx-dev   headers, the libampx.so link, the CMake package, ampx.pc
# tests/check_debs.sh builds them, installs them and builds a consumer
# against them.
#
# The MPI plugin has a package of its own so that libampx0 does not pull in
# Open MPI: libampx works without the plugin (distributed training is then
# NOT_SUPPORTED), so libampx0 only Suggests it.
#
# Files land under CPACK_PACKAGING_INSTALL_PREFIX (/usr), in the directories
# the install() rules name. Those were fixed by GNUInstallDirs when the build
# was configured, for that build's CMAKE_INSTALL_PREFIX: Debian's multiarch
# directory (lib/x86_64-linux-gnu) only when it was /usr. Configure with
# -DCMAKE_INSTALL_PREFIX=/usr for packages laid out as Debian's own; with the
# default /usr/local the library goes to /usr/lib, which the dynamic loader,
# pkg-config and find_package search as well. ampx.pc and the CMake package
# locate the prefix relative to themselves, so they work from either place.

set(AMPX_DEB_MAINTAINER "ampx maintainers <maintainers@ampx.example.org>" CACHE STRING
  "Maintainer field of the Debian packages (a placeholder by default)")
set(AMPX_DEB_RELEASE "1" CACHE STRING "Debian revision of the packages")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ampx)
set(CPACK_PACKAGE_VENDOR "ampx")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${AMPX_DEB_MAINTAINER}")
# CPackDeb puts CPACK_PACKAGE_DESCRIPTION_SUMMARY before each component's
# description unless it is CPack's default; the components' descriptions
# below carry their own synopsis lines, so it stays the default.
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${CMAKE_PROJECT_NAME} built using CMake")
# Release builds keep their symbols for the tests; the packages get them
# stripped (Debian's policy).
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
# Only the library's own components: nothing the tests, examples or bindings
# might install (their rules have no component or one of their own).
set(CPACK_COMPONENTS_ALL runtime development)
if(AMPX_WITH_MPI)
  list(APPEND CPACK_COMPONENTS_ALL mpi)
endif()

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE ${AMPX_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${AMPX_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The arm64 cross build (cmake/toolchains/aarch64-linux-gnu.cmake): dpkg
# knows the build machine's architecture only, so the packages name theirs,
# and the libraries libampx needs there (the C and C++ runtimes) are
# declared, as dpkg-shlibdeps cannot read the target's.
if(CMAKE_CROSSCOMPILING AND CMAKE_SYSTEM_NAME STREQUAL "Linux"
   AND CMAKE_SYSTEM_PROCESSOR STREQUAL "aarch64")
  set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE arm64)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS "libc6 (>= 2.34), libstdc++6 (>= 12), libgcc-s1 (>= 3.0)")
endif()
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(_ampx_deb_version "${PROJECT_VERSION}-${AMPX_DEB_RELEASE}")

# libampx0: the library. Its shared-library dependencies (libc6, libstdc++6,
# libgcc-s1; cuBLASLt in a CUDA build: below) come from dpkg-shlibdeps; the
# shlibs file it gets lets packages built against it depend on it in turn.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libampx0)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# The ldconfig trigger Debian's library packages use (CPack adds ldconfig
# calls to postinst/postrm as well, which are redundant but harmless).
file(WRITE ${CMAKE_BINARY_DIR}/packaging/triggers "activate-noawait ldconfig\n")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/packaging/triggers)
set(CPACK_DEBIAN_MPI_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/packaging/triggers)
# (Descriptions: the first line is the synopsis.)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION "${PROJECT_DESCRIPTION} - shared library
ampx gives C, C++ and other programs dynamic loss scaling, optimizers with
fp32 master weights and gradient clipping for fp16 and bf16 training, on the
CPU and, in a CUDA build, on NVIDIA GPUs, behind a stable C ABI.")
# OpenBLAS is loaded at run time for the CPU GEMM when present (ampx has a
# kernel of its own otherwise).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_RECOMMENDS "libopenblas0")
if(AMPX_WITH_MPI)
  set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "libampx-mpi0")
endif()

# cuBLASLt (a CUDA build links it dynamically). When CUDA was installed
# from packages, dpkg-shlibdeps finds the one that owns libcublasLt and
# declares it. When it was not (NVIDIA's runfile or a tarball, as on the CI
# machine), no package owns it, CPack's --ignore-missing-info leaves it out,
# and so does libampx0 unless AMPX_DEB_CUBLAS_DEPENDS names the package: for
# packages meant for machines with CUDA from NVIDIA's repository, set it to
# libcublas-<major>-<minor> (libcublas-13-0 for CUDA 13.0). It is not the
# default because a package depending on it could not be installed on the
# machine that built it.
if(AMPX_WITH_CUDA)
  set(AMPX_DEB_CUBLAS_DEPENDS "" CACHE STRING
    "Dependency of libampx0 for libcublasLt when no installed package owns it, e.g. libcublas-13-0")
  set(_ampx_cublas_owner "")
  find_program(AMPX_DPKG_QUERY dpkg-query)
  if(AMPX_DPKG_QUERY AND TARGET CUDA::cublasLt)
    get_target_property(_ampx_cublas_lib CUDA::cublasLt IMPORTED_LOCATION)
    if(_ampx_cublas_lib)
      get_filename_component(_ampx_cublas_real "${_ampx_cublas_lib}" REALPATH)
      execute_process(COMMAND ${AMPX_DPKG_QUERY} -S "${_ampx_cublas_real}"
        OUTPUT_VARIABLE _ampx_cublas_owner ERROR_QUIET RESULT_VARIABLE _ampx_rc
        OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(NOT _ampx_rc EQUAL 0)
        set(_ampx_cublas_owner "")
      endif()
    endif()
  endif()
  if(AMPX_DEB_CUBLAS_DEPENDS)
    set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS "${AMPX_DEB_CUBLAS_DEPENDS}")
  elseif(NOT _ampx_cublas_owner)
    message(STATUS "ampx: no installed package owns libcublasLt, so libampx0 will not "
      "declare it (set AMPX_DEB_CUBLAS_DEPENDS=libcublas-${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR} "
      "for NVIDIA's repository)")
  endif()
endif()

set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME libampx-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS "libampx0 (= ${_ampx_deb_version})")
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_DEVELOPMENT_DESCRIPTION "${PROJECT_DESCRIPTION} - development files
The C header ampx/ampx.h and the C++ layer ampx/ampx.hpp, the libampx.so
link, the CMake package (find_package(ampx)) and the pkg-config file ampx.pc.")

set(CPACK_DEBIAN_MPI_PACKAGE_NAME libampx-mpi0)
set(CPACK_DEBIAN_MPI_PACKAGE_SECTION libs)
# Open MPI's library comes from dpkg-shlibdeps; the plugin is only of use
# next to the libampx of the same build.
set(CPACK_DEBIAN_MPI_PACKAGE_DEPENDS "libampx0 (= ${_ampx_deb_version})")
set(CPACK_DEBIAN_MPI_DESCRIPTION "${PROJECT_DESCRIPTION} - MPI plugin
The plugin libampx loads for data-parallel training over MPI (Open MPI).")

include(CPack)
