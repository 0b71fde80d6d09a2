# kvtier-hbm-bench: GPU page copy throughput through kvtierd vs bare
# cudaMemcpyAsync (tests/gpu/run.sh runs it). Needs CUDA. A benchmark through
# the daemon, so it lives in tools/ and speaks to kvtierd through the client
# library. Included from tools/bench/CMakeLists.txt.
if(KVTIER_HAVE_CUDA)
  add_executable(kvtier-hbm-bench ${CMAKE_CURRENT_LIST_DIR}/hbm_bench.cc)
  target_link_libraries(kvtier-hbm-bench PRIVATE kvtier_client kvtier_cli CUDA::cudart absl::flags
                        absl::strings)
  target_compile_definitions(kvtier-hbm-bench PRIVATE KVTIERD_PATH="$<TARGET_FILE:kvtierd>")
  add_dependencies(kvtier-hbm-bench kvtierd)
endif()
