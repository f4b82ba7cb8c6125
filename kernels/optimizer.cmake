# Optimizer kernels: shared by the parameter server and the workers.
add_library(strata_optim STATIC ${CMAKE_CURRENT_LIST_DIR}/optimizer.cc)
target_link_libraries(strata_optim
  PUBLIC strata_proto absl::status absl::statusor absl::strings
         absl::synchronization absl::function_ref Threads::Threads
  PRIVATE strata_warnings)
# sqrt vectorizes only without errno; no FMA contraction keeps every
# target_clones variant bit-identical to the others.
target_compile_options(strata_optim PRIVATE -fno-math-errno -ffp-contract=off)

strata_test(optimizer_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/optimizer_test.cc
  DEPS strata_optim)
