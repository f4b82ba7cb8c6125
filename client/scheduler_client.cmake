# Included from client/CMakeLists.txt: the member-side scheduler client.
find_package(spdlog CONFIG REQUIRED)

add_library(strata_scheduler_client STATIC
  ${CMAKE_CURRENT_LIST_DIR}/scheduler_client.cc)
target_link_libraries(strata_scheduler_client
  PUBLIC strata_common strata_proto absl::status absl::statusor
         absl::synchronization absl::time gRPC::grpc++
  PRIVATE spdlog::spdlog strata_warnings)

strata_test(scheduler_client_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/scheduler_client_test.cc
  DEPS strata_scheduler_client strata_scheduler)
