# Command-line tests of the format commands, the sweep report and bad input (label cli): a Catch2
# program that runs the built `lpemu` binary on tiny data.
add_executable(lpemu_cli_tests ${CMAKE_CURRENT_LIST_DIR}/cli/format_cli_test.cpp
               ${CMAKE_CURRENT_LIST_DIR}/cli/report_html_test.cpp ${CMAKE_CURRENT_LIST_DIR}/cli/robustness_cli_test.cpp)
target_link_libraries(lpemu_cli_tests PRIVATE lpemu::lpemu lpemu_test_support nlohmann_json::nlohmann_json hdf5::hdf5 $<BUILD_INTERFACE:lpemu_build_options>)
add_dependencies(lpemu_cli_tests lpemu_cli)
catch_discover_tests(lpemu_cli_tests TEST_PREFIX "cli/" DISCOVERY_MODE PRE_TEST PROPERTIES LABELS cli)
