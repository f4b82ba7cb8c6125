# Single-GPU training throughput (bench/gpu_train.sh runs it). CUDA builds
# only.
if(STRATA_CUDA)
  add_executable(gpu_train_bench ${CMAKE_CURRENT_LIST_DIR}/gpu_train_bench.cc)
  target_link_libraries(gpu_train_bench
    PRIVATE strata_model_cuda strata_optim CLI11::CLI11 absl::strings
            strata_warnings)
endif()
