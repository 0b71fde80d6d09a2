# CPack: `cpack -G DEB` (or `ninja package`) in a build directory makes
# kvtier_<version>_<arch>.deb with everything `cmake --install` installs,
# under /usr (configuration under /etc). Its Depends are what dpkg-shlibdeps
# finds for the ELF files (the Debian runtime libraries they link), plus
# adduser (postinst) and the Python package's interpreter and numpy.
# Build the package from a Release build without -DKVTIER_TEST_HOOKS=ON.
set(_kvtier_contact "kvtier maintainers <maintainers@kvtier.invalid>")
set(KVTIER_PACKAGE_CONTACT "${_kvtier_contact}" CACHE STRING "Maintainer field of the DEB")
# A build directory configured before 0.2.0 cached the old placeholder; a
# cache variable keeps its value, so replace that one (and only that one).
if(KVTIER_PACKAGE_CONTACT STREQUAL "kvtier maintainers <kvtier@localhost>")
  set_property(CACHE KVTIER_PACKAGE_CONTACT PROPERTY VALUE "${_kvtier_contact}")
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kvtier)
# The one version source: project(VERSION) in the top-level CMakeLists.txt,
# which also gives every program's --version, STATS/PING's daemon version,
# the library's SONAME and kvtier.__version__.
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${KVTIER_PACKAGE_CONTACT}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "tiered KV-cache manager for LLM inference")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
    "kvtierd keeps attention KV-cache pages in GPU memory, pinned host RAM and NVMe and\n"
    "serves them to inference processes over ZeroMQ, so a prompt whose prefix was seen\n"
    "before is answered by loading its pages instead of recomputing them. This package\n"
    "has the daemon and its systemd unit, kvtierctl, kvtier-stress, kvtier-sim, the\n"
    "small decoder (kvtier-generate), libkvtier-client with its headers, CMake package\n"
    "and pkg-config file, and the `kvtier` Python package.")
if(KVTIER_TEST_HOOKS)
  string(APPEND CPACK_PACKAGE_DESCRIPTION
         "\nTEST BUILD: kill points compiled in (KVTIER_TEST_HOOKS=ON); not for production.")
endif()
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# A shlibs file for libkvtier-client (packages built against it depend on
# this version), and packaging/debian/triggers runs ldconfig for it.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY "=")
set(_kvtier_depends "adduser")
if(TARGET kvtier_python)
  # The extension is built for one interpreter minor version (the one
  # client/python found; its result variables are scoped to that directory).
  find_package(Python3 COMPONENTS Interpreter QUIET)
  math(EXPR _kvtier_py_next "${Python3_VERSION_MINOR} + 1")
  string(APPEND _kvtier_depends
         ", python3 (>= ${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}~)"
         ", python3 (<< ${Python3_VERSION_MAJOR}.${_kvtier_py_next}), python3-numpy")
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${_kvtier_depends}")
# CUDA builds: libcudart comes from NVIDIA's toolkit, not from a Debian
# package, so dpkg-shlibdeps (run with --ignore-missing-info) cannot name
# it; the host needs the CUDA runtime of the toolkit the package was built with.
set(_kvtier_debian ${PROJECT_SOURCE_DIR}/packaging/debian)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${_kvtier_debian}/postinst ${_kvtier_debian}/prerm ${_kvtier_debian}/postrm
    ${_kvtier_debian}/conffiles ${_kvtier_debian}/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

include(CPack)
