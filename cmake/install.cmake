# `cmake --install` rules: the programs, libkvtier-client.so with its public
# headers, a CMake package (find_package(kvtier CONFIG) -> kvtier::client), a
# pkg-config file, the systemd unit of kvtierd, and the DEB (cmake/package.cmake).
# Included from the top-level CMakeLists.txt after every subdirectory, so the
# targets it installs exist. The Python package installs itself
# (client/python/CMakeLists.txt, component `python`).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Components: runtime (programs, the shared library, the service), dev
# (headers, CMake package, pkg-config file), python (client/python).
set(KVTIER_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier)

# --- the programs -----------------------------------------------------------
set(_kvtier_programs kvtierd kvtierctl kvtier-stress kvtier-sim kvtier-generate
    kvtier-make-checkpoint)
set(KVTIER_INSTALLED_PROGRAMS "")
foreach(_prog IN LISTS _kvtier_programs)
  if(TARGET ${_prog})
    list(APPEND KVTIER_INSTALLED_PROGRAMS ${_prog})
  else()
    message(STATUS "kvtier: ${_prog} is not built here, so not installed")
  endif()
endforeach()
install(TARGETS ${KVTIER_INSTALLED_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        COMPONENT runtime)

# --- libkvtier-client.so ----------------------------------------------------
# The same objects as the static kvtier_client (and the kvtier_api it stands
# on) that in-tree programs link, put whole into one shared library: an
# out-of-tree program links -lkvtier-client and never sees our private static
# dependencies (the wire schema's protobuf code, ZeroMQ). Its public headers
# do use Abseil (Status, StatusOr, Span), so Abseil is part of its interface.
# Its objects are the static libraries' own (no second compile; they are
# position-independent, CMAKE_POSITION_INDEPENDENT_CODE); linking kvtier_client
# as well brings in what those objects need, and nothing twice.
add_library(kvtier_client_shared SHARED $<TARGET_OBJECTS:kvtier_client> $<TARGET_OBJECTS:kvtier_api>)
target_link_libraries(kvtier_client_shared PRIVATE kvtier_client)
# Every symbol resolved at link time (no missing private dependency found
# only by a consumer), and the generated protobuf classes kept local: they
# are an implementation detail, and exporting them would clash with another
# copy of the same schema in the process.
target_link_options(kvtier_client_shared PRIVATE "LINKER:--no-undefined"
                    "LINKER:--exclude-libs,libkvtier_proto.a")
target_include_directories(kvtier_client_shared INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/client/include>
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/api/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(kvtier_client_shared INTERFACE absl::status absl::statusor absl::span
                      absl::strings)
# The headers use C++20 (defaulted comparison operators in kvtier/layout.h).
target_compile_features(kvtier_client_shared INTERFACE cxx_std_20)
# Before 1.0 every minor release may change the ABI: the SONAME carries it.
set(KVTIER_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
set_target_properties(kvtier_client_shared PROPERTIES
  OUTPUT_NAME kvtier-client
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/client
  EXPORT_NAME client
  VERSION ${PROJECT_VERSION}
  SOVERSION ${KVTIER_SOVERSION})
install(TARGETS kvtier_client_shared EXPORT kvtierTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)

# Installed ELF files keep the run paths of libraries outside the build tree
# and the system directories: on a CUDA build, libcudart.so comes from the
# toolkit (/usr/local/cuda/lib), which the dynamic linker may not search.
foreach(_t IN LISTS KVTIER_INSTALLED_PROGRAMS ITEMS kvtier_client_shared kvtier_python)
  if(TARGET ${_t})
    set_property(TARGET ${_t} PROPERTY INSTALL_RPATH_USE_LINK_PATH ON)
  endif()
endforeach()

# --- public headers: client/include/kvtier/*.h and the api/ headers they
# include (transitively), nothing else of api/.
function(kvtier_public_headers out)
  file(GLOB todo ${PROJECT_SOURCE_DIR}/client/include/kvtier/*.h)
  set(done "")
  while(todo)
    list(POP_FRONT todo header)
    if(header IN_LIST done)
      continue()
    endif()
    list(APPEND done ${header})
    file(STRINGS ${header} includes REGEX "^#include \"kvtier/[a-z_]+\\.h\"")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^#include \"kvtier/([a-z_]+\\.h)\".*" "\\1" name "${line}")
      foreach(dir client/include api/include)
        if(EXISTS ${PROJECT_SOURCE_DIR}/${dir}/kvtier/${name})
          list(APPEND todo ${PROJECT_SOURCE_DIR}/${dir}/kvtier/${name})
        endif()
      endforeach()
    endforeach()
  endwhile()
  list(SORT done)
  # An #include added to a public header changes this list: configure again then.
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${done})
  set(${out} ${done} PARENT_SCOPE)
endfunction()
kvtier_public_headers(KVTIER_PUBLIC_HEADERS)
install(FILES ${KVTIER_PUBLIC_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvtier
        COMPONENT dev)

# --- CMake package: find_package(kvtier CONFIG) -> kvtier::client ---------------
install(EXPORT kvtierTargets NAMESPACE kvtier:: DESTINATION ${KVTIER_INSTALL_CMAKEDIR}
        COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvtierConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kvtierConfig.cmake
                              INSTALL_DESTINATION ${KVTIER_INSTALL_CMAKEDIR})
# Pre-1.0: only the same minor version is ABI compatible (the SONAME's rule).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvtierConfig.cmake ${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake
        DESTINATION ${KVTIER_INSTALL_CMAKEDIR} COMPONENT dev)

# --- pkg-config: kvtier-client.pc -------------------------------------------------
# Relocatable (prefix found from the .pc's own directory), so one file serves
# `cmake --install --prefix ANY` and the DEB alike.
file(RELATIVE_PATH KVTIER_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" KVTIER_PC_TO_PREFIX "${KVTIER_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/kvtier-client.pc.in
               ${PROJECT_BINARY_DIR}/kvtier-client.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kvtier-client.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# --- the service: systemd unit, /etc/default/kvtierd, docs ------------------------
# The unit names the installed kvtierd and its environment file by absolute
# path, and both depend on the prefix chosen at *install* time (`--prefix`,
# or /usr when CPack builds the DEB), so the files are written then.
install(CODE "
  set(KVTIER_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(KVTIER_BINARY_DIR \"${PROJECT_BINARY_DIR}\")
  set(KVTIER_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(KVTIER_DOCDIR \"${CMAKE_INSTALL_DOCDIR}\")
  include(\"${PROJECT_SOURCE_DIR}/cmake/install_service.cmake\")
" COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/OPERATIONS.md
              ${PROJECT_SOURCE_DIR}/docs/SECURITY.md ${PROJECT_SOURCE_DIR}/docs/PROTOCOL.md
              ${PROJECT_SOURCE_DIR}/docs/PYTHON.md ${PROJECT_SOURCE_DIR}/docs/INTEGRATIONS.md
              ${PROJECT_SOURCE_DIR}/docs/BENCHMARKS.md ${PROJECT_SOURCE_DIR}/docs/TOOLS.md
              ${PROJECT_SOURCE_DIR}/CHANGELOG.md ${PROJECT_SOURCE_DIR}/LICENSE
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)

# --- man pages, generated from each installed program's --help -------------
# help2man (Debian's package; scripts/setup.sh installs it) runs the built
# program with --help and --version, so a man page says what the program
# does. kvtierd is a daemon: section 8; the rest section 1.
find_program(KVTIER_HELP2MAN help2man)
if(KVTIER_HELP2MAN)
  set(_kvtier_man_pages "")
  set(_man_kvtierd "tiered KV-cache daemon for LLM inference")
  set(_man_kvtierctl "show and steer a running kvtierd")
  set(_man_kvtier-stress "replay a request trace against kvtierd and verify every page")
  set(_man_kvtier-sim "offline capacity planning: kvtierd's eviction policy over a trace")
  set(_man_kvtier-generate "Llama-style decoder that restores its KV cache from kvtierd")
  set(_man_kvtier-make-checkpoint "write a small random Llama checkpoint for tests")
  foreach(_prog IN LISTS KVTIER_INSTALLED_PROGRAMS)
    set(_section 1)
    if(_prog STREQUAL "kvtierd")
      set(_section 8)
    endif()
    set(_man ${PROJECT_BINARY_DIR}/man/${_prog}.${_section})
    add_custom_command(
      OUTPUT ${_man}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
      COMMAND ${KVTIER_HELP2MAN} --no-info --section=${_section} --output=${_man}
              "--name=${_man_${_prog}}" $<TARGET_FILE:${_prog}>
      DEPENDS ${_prog}
      COMMENT "man page of ${_prog}"
      VERBATIM)
    list(APPEND _kvtier_man_pages ${_man})
    install(FILES ${_man} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${_section} COMPONENT runtime)
  endforeach()
  add_custom_target(kvtier_man_pages ALL DEPENDS ${_kvtier_man_pages})
else()
  message(STATUS "kvtier: no help2man, so no man pages (scripts/setup.sh installs it)")
endif()
# Debian policy 12.5: the copyright file in the package's doc directory,
# machine-readable (DEP-5).
install(FILES ${PROJECT_SOURCE_DIR}/packaging/debian/copyright
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)
# Monitoring: the Grafana dashboard and the Prometheus alert rules
# (docs/OPERATIONS.md, "Monitoring"), for the operator to copy into their
# Grafana and Prometheus; nothing here loads them.
install(FILES ${PROJECT_SOURCE_DIR}/packaging/monitoring/grafana-kvtier.json
              ${PROJECT_SOURCE_DIR}/packaging/monitoring/kvtier-alerts.yml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/kvtier/monitoring COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/tenants.json.example
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples RENAME tenants.json COMPONENT runtime)

include(${CMAKE_CURRENT_LIST_DIR}/package.cmake)
