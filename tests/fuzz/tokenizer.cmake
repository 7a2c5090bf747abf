# Tokenizer fuzz targets. Include from tests/fuzz/CMakeLists.txt after mt_fuzz_target and
# mt_fuzz_smoke_test are defined:  include(${CMAKE_CURRENT_SOURCE_DIR}/tokenizer.cmake)
set(MT_TOKENIZER_FUZZ_SOURCES ${MT_SOURCES_base} ${MT_SOURCES_io} ${MT_SOURCES_quant}
    ${MT_SOURCES_gguf} ${MT_SOURCES_tokenizer})
foreach(target tokenizer_fuzz tokenizer_json_fuzz)
  mt_fuzz_target(${target} ${MT_TOKENIZER_FUZZ_SOURCES})
  target_link_libraries(${target} PRIVATE nlohmann_json::nlohmann_json pcre2-8 utf8proc)
endforeach()
mt_fuzz_smoke_test(fuzz.tokenizer.smoke tokenizer_fuzz
                   ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_corpus/encode 20)
mt_fuzz_smoke_test(fuzz.tokenizer_json.smoke tokenizer_json_fuzz
                   ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_corpus/json 20)
