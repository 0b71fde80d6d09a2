# Unit tests of daemon/ parts that need no running daemon.
kvtier_test(NAME daemon_test
  SRCS ${CMAKE_CURRENT_LIST_DIR}/daemon_test.cc
       ${CMAKE_CURRENT_LIST_DIR}/data_path_test.cc
       ${CMAKE_CURRENT_LIST_DIR}/daemon_security_test.cc
  DEPS kvtier_daemon kvtier_client
  LABELS unit)
