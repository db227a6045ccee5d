// A run's outputs as one unit: undone together when the run fails (lpemu/io/output.hpp writes them).
#pragma once

#include <filesystem>
#include <vector>

namespace lpemu::io {

/// A run's outputs as one unit. Inside its scope every file AtomicFile commits (the file it
/// replaces is kept aside) and every folder create_output_dir makes is recorded; commit() keeps
/// them; a scope left without commit() (an exception, a result that could not be reported) removes
/// them, puts the replaced files back and removes the folders it made, so a failed run leaves
/// what was there before. Scopes nest (an inner commit hands its outputs to the outer scope); each
/// thread has its own stack of scopes.
class OutputTransaction {
 public:
  /// Opens a scope on this thread (inside the current one, if any).
  OutputTransaction();
  OutputTransaction(const OutputTransaction&) = delete;
  OutputTransaction& operator=(const OutputTransaction&) = delete;
  /// Undoes every recorded output unless commit() ran; closes the scope.
  ~OutputTransaction();
  /// Keeps the outputs (hands them to the outer scope, or drops the replaced files' copies).
  void commit();

  /// Outputs written while a Pause lives are not recorded: checkpoints a later run resumes from
  /// (a sweep's plan results), kept when the run fails.
  class Pause {
   public:
    /// Hides this thread's scopes until destroyed.
    Pause();
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;
    /// Restores them.
    ~Pause();

   private:
    OutputTransaction* saved_;
  };

  /// One recorded output.
  struct Entry {
    std::filesystem::path target;  ///< the file or folder written
    std::filesystem::path backup;  ///< the replaced file's copy; empty if there was none
    bool folder = false;           ///< a folder made by create_output_dir
  };
  /// The innermost open scope of this thread, or null.
  static OutputTransaction* current();
  /// Records an output of this scope.
  void record(Entry e);

 private:
  std::vector<Entry> entries_;
  OutputTransaction* outer_ = nullptr;
  bool done_ = false;
};

}  // namespace lpemu::io
