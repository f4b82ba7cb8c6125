# Optimizer kernel benchmark: Adam bandwidth against a STREAM triad
# (bench/optimizer.sh runs it).
add_executable(optimizer_bench ${CMAKE_CURRENT_LIST_DIR}/optimizer_bench.cc)
target_link_libraries(optimizer_bench PRIVATE strata_optim strata_warnings)
# The triad must be compiled like the Adam kernel for the ratio to be fair.
target_compile_options(optimizer_bench PRIVATE -fno-math-errno
                                               -ffp-contract=off)
