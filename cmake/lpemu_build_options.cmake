# Warning set, floating-point hygiene and sanitizers for lpemu's own targets.
add_library(lpemu_build_options INTERFACE)
target_compile_options(lpemu_build_options INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wold-style-cast -Wdouble-promotion
  -Wnon-virtual-dtor -Wimplicit-fallthrough
  # Bit-exact emulation: no fused multiply-add contraction, ever.
  -ffp-contract=off
  # g++ 12 reports false -Wrestrict positives on `"literal" + std::string` at -O3 (GCC PR 105651).
  $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>
  $<$<BOOL:${LPEMU_WERROR}>:-Werror>)
if(LPEMU_NATIVE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  # g++ 12's AVX-512 intrinsics (_mm512_undefined_pd, used by Eigen's packet transposes) trip a
  # false -Wmaybe-uninitialized once inlined (GCC PR 105593, fixed in 13).
  target_compile_options(lpemu_build_options INTERFACE -Wno-maybe-uninitialized)
endif()
if(LPEMU_SANITIZE)
  # Sanitizer instrumentation makes g++ 12 report false -Wmaybe-uninitialized inside libstdc++
  # (std::regex in Catch2, std::optional): keep it a warning there, not an error.
  target_compile_options(lpemu_build_options INTERFACE
    -fsanitize=${LPEMU_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all
    $<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>)
  target_link_options(lpemu_build_options INTERFACE -fsanitize=${LPEMU_SANITIZE})
endif()
