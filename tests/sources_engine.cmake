target_sources(lpemu_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/plan_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/plan_to_toml_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/training_plan_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/gemm_empty_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/tokenizer_metrics_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/forward_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/weights_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/cli_engine_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/block_plan_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/datapath_plan_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/datapath_operand_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/gemm_cli_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/bpe_tokenizer_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/sampling_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/batch_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/batch_eval_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/support/tiny_model.cpp)
target_link_libraries(lpemu_unit_tests PRIVATE nlohmann_json::nlohmann_json)
target_sources(lpemu_golden_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/golden/engine/stories260k_test.cpp)
add_dependencies(lpemu_unit_tests lpemu_cli)
target_sources(lpemu_property_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/property/engine/forward_property_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/property/engine/linear_property_test.cpp)

# Hugging Face import: tiny random checkpoints written as safetensors by PyTorch, logits of
# `lpemu eval` against an independent float64 forward pass (needs python3-torch, python3-pytest,
# python3-h5py). One pytest process for every case (importing torch is slow).
add_test(NAME python/hf_import
         COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_LIST_DIR}/python/test_hf_import.py)
set_tests_properties(python/hf_import PROPERTIES LABELS python ENVIRONMENT "LPEMU_BINARY=$<TARGET_FILE:lpemu_cli>")
