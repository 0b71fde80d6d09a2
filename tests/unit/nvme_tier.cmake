# nvme_tier_test: the NVMe tier under the TierManager (real file, real RocksDB).
kvtier_test(NAME nvme_tier_test
  SRCS ${PROJECT_SOURCE_DIR}/tests/unit/nvme_tier_test.cc
       ${PROJECT_SOURCE_DIR}/tests/unit/store_invariants_test.cc
       ${PROJECT_SOURCE_DIR}/tests/unit/nvme_reserve_test.cc
  DEPS kvtier_nvme kvtier_tiers RocksDB::rocksdb
  LABELS unit
  TIMEOUT 120)
target_include_directories(nvme_tier_test PRIVATE ${PROJECT_SOURCE_DIR})
