# Unit tests of daemon/ parts that need no running daemon.
kvtier_test(NAME daemon_test
  SRCS ${CMAKE_CURRENT_LIST_DIR}/daemon_test.cc
       ${CMAKE_CURRENT_LIST_DIR}/data_path_test.cc
       ${CMAKE_CURRENT_LIST_DIR}/daemon_security_test.cc
  DEPS kvtier_daemon kvtier_client
  LABELS unit)
# The registered-buffer warm-up, stepped by hand over real shm objects.
kvtier_test(NAME buffer_warmer_test SRCS ${CMAKE_CURRENT_LIST_DIR}/buffer_warmer_test.cc
            DEPS kvtier_daemon LABELS unit)
# The heap thresholds kvtierd sets (process-wide, hence a binary of its own).
kvtier_test(NAME allocator_test SRCS ${CMAKE_CURRENT_LIST_DIR}/allocator_test.cc
            DEPS kvtier_daemon LABELS unit)
