target_sources(lpemu_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unit/cost/target_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/cost/records_to_toml_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/cost/mac_model_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/cost/workload_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/cost/cli_cost_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/cost/collectives_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/cost/kernel_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/cost/parallel_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/cost/cli_cluster_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/cost/plan_matrix_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/cost/job_settings_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/cost/cli_jobs_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/cost/published_runs_test.cpp)
