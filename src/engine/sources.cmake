target_sources(lpemu_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/ops.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sgemm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/roles.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/datapath_gemm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/weights.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/config_check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/session.cpp)
target_sources(lpemu_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/bpe_tokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hf_import.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sampling.cpp)
