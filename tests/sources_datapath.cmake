target_sources(lpemu_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unit/datapath/datapath_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/datapath/to_toml_test.cpp)
target_sources(lpemu_golden_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/golden/datapath/tensor_cores_test.cpp)
target_sources(lpemu_property_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/property/datapath/datapath_property_test.cpp)
target_link_libraries(lpemu_golden_tests PRIVATE lpemu_toml)

# End-to-end runs of the `lpemu` datapath commands (label cli).
set(_dp_cli ${CMAKE_CURRENT_LIST_DIR}/cli/datapath)
add_test(NAME cli/datapath/dot_v100_cases
         COMMAND lpemu_cli dot --datapath v100_fp16_fp32 --cases ${_dp_cli}/v100_cases.csv)
set_tests_properties(cli/datapath/dot_v100_cases PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "bf7fffff,34000000,1.1920928955078125e-07,5.96046447753906250+e-08.*3f7fffff,3f800001,")
add_test(NAME cli/datapath/dot_bad_row COMMAND lpemu_cli dot --datapath v100_fp16_fp32 --cases ${_dp_cli}/bad_row.csv)
set_tests_properties(cli/datapath/dot_bad_row PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "bad_row.csv:3: column 'a' = 'zz': expected hex codes of fp16")
add_test(NAME cli/datapath/dot_wide_code COMMAND lpemu_cli dot --datapath v100_fp16_fp32 --cases ${_dp_cli}/wide_code.csv)
set_tests_properties(cli/datapath/dot_wide_code PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "wide_code.csv:2: column 'b' = '13c00': code 0x13c00 is wider than format 'fp16' \\(16 bits\\)")
add_test(NAME cli/datapath/dot_unknown COMMAND lpemu_cli dot --datapath h100_e4m3_fp33 --cases ${_dp_cli}/v100_cases.csv)
set_tests_properties(cli/datapath/dot_unknown PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "unknown datapath 'h100_e4m3_fp33'; closest known names: h100_e4m3_fp32")
add_test(NAME cli/datapath/error_plot
         COMMAND lpemu_cli datapath-error --datapath h100_e4m3_fp32,h100_e4m3_fp32_promote128 --inputs fp8_e4m3
                 --k 16,256 --trials 5 --out ${CMAKE_CURRENT_BINARY_DIR}/datapath_error_out)
set_tests_properties(cli/datapath/error_plot PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "wrote .*datapath_error.csv.*wrote .*datapath_error.svg")
