# Install-time half of the service rules (cmake/install.cmake runs it from
# install(CODE)): writes the systemd unit and /etc/default/kvtierd for the
# prefix being installed to. packaging/systemd/kvtierd.service is written for
# the DEB's prefix, /usr; another prefix gets its own paths in the copy.
# In: KVTIER_SOURCE_DIR, KVTIER_BINARY_DIR, KVTIER_BINDIR and KVTIER_DOCDIR
# (relative), and CMAKE_INSTALL_PREFIX as the install sets it.

# GNU/FHS rule (as GNUInstallDirs): host configuration of a /usr install is
# in /etc, of any other prefix in PREFIX/etc. The unit goes where systemd
# looks for a prefix: /usr/lib/systemd/system, /usr/local/lib/systemd/system.
set(_prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/+$" "" _prefix "${_prefix}")
if(_prefix STREQUAL "/usr" OR _prefix STREQUAL "")
  set(_sysconfdir "/etc")
else()
  set(_sysconfdir "${_prefix}/etc")
endif()
set(_unitdir "${_prefix}/lib/systemd/system")

file(READ "${KVTIER_SOURCE_DIR}/packaging/systemd/kvtierd.service" _unit)
string(REPLACE "/usr/bin/kvtierd" "${_prefix}/${KVTIER_BINDIR}/kvtierd" _unit "${_unit}")
string(REPLACE "/etc/default/kvtierd" "${_sysconfdir}/default/kvtierd" _unit "${_unit}")
string(REPLACE "file:/usr/share/doc/kvtier/" "file:${_prefix}/${KVTIER_DOCDIR}/" _unit "${_unit}")
# One staging file per destination, so a cpack and a `cmake --install` at the
# same time do not write each other's copy.
string(MD5 _key "$ENV{DESTDIR}${_prefix}")
set(_staged "${KVTIER_BINARY_DIR}/packaging-staged/${_key}")
file(MAKE_DIRECTORY "${_staged}")
file(WRITE "${_staged}/kvtierd.service" "${_unit}")

# file(INSTALL) honours DESTDIR (CPack stages the DEB with it) and records
# the files in install_manifest.txt.
file(INSTALL DESTINATION "${_unitdir}" TYPE FILE
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
     FILES "${_staged}/kvtierd.service")
file(INSTALL DESTINATION "${_sysconfdir}/default" TYPE FILE RENAME kvtierd
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
     FILES "${KVTIER_SOURCE_DIR}/packaging/systemd/kvtierd.default")
