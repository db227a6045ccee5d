// libFuzzer target: the HDF5 model loader (the bytes become a scratch model.h5).
//
// Seeds (tests/fuzz/corpus/model_h5/): two tiny models of a few tens of KB (one with a Hugging
// Face tokenizer, one with the shipped model's SentencePiece tokenizer), copies of them with one
// attribute of the wrong type, size or value or missing, and single-byte flips of the attribute
// region; an execution then costs a tiny file, not the 1.1 MB shipped model.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz/fuzz_support.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/io/hdf5.hpp"

// libhdf5 1.10 allocates a metadata entry by the size a (corrupt) file declares before it reads it
// (H5C_load_entry); glibc refuses a size beyond memory and libhdf5 reports the failed allocation as
// an error (`lpemu` exits 2: "not a readable HDF5 file"). Under ASan such a malloc() returns NULL
// as well rather than aborting: above 2 GiB (libFuzzer's default -rss_limit_mb). An operator new
// of lpemu's own above it still aborts (ASan reports it), so lpemu's allocations stay checked.
extern "C" const char* __asan_default_options() {  // NOLINT(bugprone-reserved-identifier)
  return "allocator_may_return_null=1:max_allocation_size_mb=2048";
}

// libhdf5 1.10.8 leaks blocks of its free-list allocator on error paths: H5O__chunk_deserialize
// takes a message block from H5FL_blk_malloc and drops it when it fails to decode an object header
// (LeakSanitizer with fast_unwind_on_malloc=0, which follows libhdf5's frames: H5Fopen > H5G_mkroot >
// H5O_msg_exists > H5O_protect > H5C_protect > H5O__cache_deserialize > H5O__chunk_deserialize; lpemu
// made one failed H5Fopen call and holds no handle). The default fast unwinder stops at
// H5FL__malloc, so blocks of that allocator are not reported as leaks; instead every execution
// checks that libhdf5 holds no open object once the loader returns (a handle lpemu failed to
// close, whose blocks those would be). Every other leak is reported.
extern "C" const char* __lsan_default_suppressions() {  // NOLINT(bugprone-reserved-identifier)
  return "leak:H5FL__malloc\n";
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Memory libhdf5 frees goes back to the allocator at once: libFuzzer counts mallocs and frees per
  // execution and runs a whole-heap leak scan whenever they differ, which libhdf5's free lists made
  // happen on nearly every execution (half the time of a run), and ASan sees every reuse.
  static const bool once = [] {
    lpemu::io::h5_disable_free_lists();
    return true;
  }();
  (void)once;
  static const std::filesystem::path file = lpemu::test::scratch_path("model.h5");
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  lpemu::test::expect_clean([&] { (void)lpemu::engine::load_model(file); });
  if (const std::size_t open = lpemu::io::h5_open_objects(); open != 0) {
    std::fprintf(stderr, "model_h5: %zu HDF5 objects left open after load_model\n", open);
    std::abort();
  }
  return 0;
}
