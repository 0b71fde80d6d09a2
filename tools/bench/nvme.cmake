# kvtier-nvme-bench: throughput of the NVMe tier's file device against fio
# (scripts/bench_nvme.sh). Links tiers/nvme directly: it measures the I/O
# engine, not the daemon. Included from tools/bench/CMakeLists.txt.
add_executable(kvtier-nvme-bench ${CMAKE_CURRENT_LIST_DIR}/nvme_bench.cc)
target_link_libraries(kvtier-nvme-bench PRIVATE kvtier_nvme_device kvtier_api absl::flags absl::flags_parse
                      absl::flags_usage absl::str_format absl::strings absl::synchronization
                      nlohmann_json::nlohmann_json Threads::Threads)
