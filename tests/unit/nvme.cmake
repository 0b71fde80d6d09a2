# nvme_device_test: unit tests of the NVMe block device (tiers/nvme/).
# Included from tests/CMakeLists.txt; paths are relative to the project root.
kvtier_test(
  NAME nvme_device_test
  SRCS ${PROJECT_SOURCE_DIR}/tests/unit/nvme_device_test.cc
  DEPS kvtier_nvme_device absl::synchronization absl::strings Threads::Threads
  LABELS unit
  TIMEOUT 60)
