# tiers_test: unit tests of the store (tiers/). Included from
# tests/CMakeLists.txt; paths are relative to the project root.
kvtier_test(
  NAME tiers_test
  SRCS ${PROJECT_SOURCE_DIR}/tests/unit/tiers_test.cc
       ${PROJECT_SOURCE_DIR}/tests/unit/tiers_manager_test.cc
       ${PROJECT_SOURCE_DIR}/tests/unit/tiers_eviction_test.cc
       ${PROJECT_SOURCE_DIR}/tests/unit/tiers_policy_test.cc
       ${PROJECT_SOURCE_DIR}/tests/unit/tiers_concurrency_test.cc
       ${PROJECT_SOURCE_DIR}/tests/unit/tiers_reserve_test.cc
       ${PROJECT_SOURCE_DIR}/tests/unit/tiers_tenants_test.cc
       ${PROJECT_SOURCE_DIR}/tests/unit/tiers_memory_test.cc
       ${PROJECT_SOURCE_DIR}/tests/unit/tiers_lookup_test.cc
       ${PROJECT_SOURCE_DIR}/tests/unit/tiers_pointer_table_test.cc
  DEPS kvtier_tiers PkgConfig::XXHASH Threads::Threads
  LABELS unit
  TIMEOUT 120)
target_include_directories(tiers_test PRIVATE ${PROJECT_SOURCE_DIR})

# tiers_read_batch_test: TierManager::ReadPages (batched GET reads) over the
# NVMe tier on a memory device behind the fault injector.
kvtier_test(
  NAME tiers_read_batch_test
  SRCS ${PROJECT_SOURCE_DIR}/tests/unit/tiers_read_batch_test.cc
  DEPS kvtier_nvme kvtier_tiers RocksDB::rocksdb
  LABELS unit
  TIMEOUT 120)
target_include_directories(tiers_read_batch_test PRIVATE ${PROJECT_SOURCE_DIR})

# tiers_layer_reads_test: TierManager::ReadLayers (layer-wise GET reads,
# verified by chunk sums) over the NVMe tier on a memory device.
kvtier_test(
  NAME tiers_layer_reads_test
  SRCS ${PROJECT_SOURCE_DIR}/tests/unit/tiers_layer_reads_test.cc
  DEPS kvtier_nvme kvtier_tiers RocksDB::rocksdb
  LABELS unit
  TIMEOUT 120)
target_include_directories(tiers_layer_reads_test PRIVATE ${PROJECT_SOURCE_DIR})
