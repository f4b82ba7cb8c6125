# CPU training throughput of the GPT model (bench/cpu_train.sh runs it).
add_executable(cpu_train_bench ${CMAKE_CURRENT_LIST_DIR}/cpu_train_bench.cc)
target_link_libraries(cpu_train_bench
  PRIVATE strata_model strata_optim CLI11::CLI11 strata_warnings)
