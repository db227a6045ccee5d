// Test-only helpers shared by every test kind.
#pragma once

#include <bit>
#include <cstdint>
#include <filesystem>
#include <string>

namespace lpemu::test {

/// True in a build with AddressSanitizer (the sanitizer stage): tests whose repetitions add no
/// memory or UB coverage (finite differences over every parameter) sample instead there.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

/// Path of a file in the source tree (tests must not depend on the working directory).
std::string source_path(const std::string& relative);
/// Shell command (quoted) that runs the built `lpemu`; in a cross build, under its emulator.
std::string lpemu_binary();
/// Float bits as hex, for failure messages.
std::string hex32(float x);
/// Double bits as hex, for failure messages.
std::string hex64(double x);
/// True if a and b have identical bits, or are both NaN of the same sign.
bool same_bits_or_nan(double a, double b);

/// The bytes of a file (empty if it cannot be read).
std::string slurp(const std::filesystem::path& p);

/// This process's own temporary root, `<temp>/lpemu-tests-<pid>-XXXXXX/`: made on first use, removed at exit.
const std::filesystem::path& temp_root();

/// A fresh empty folder under temp_root() for one test case (`s / "file"`), removed with the object.
class Scratch {
 public:
  /// Makes `temp_root()/NAME-N` (N counts the scratch folders of this process).
  explicit Scratch(const std::string& name = "scratch");
  /// Removes the folder and everything in it.
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  /// A path inside the folder.
  std::filesystem::path operator/(const std::string& file) const { return dir / file; }
  /// The folder.
  std::filesystem::path dir;
};

/// A finished command: exit status (-1 if killed by a signal; 124 if past its time limit), stdout, stderr.
struct Run {
  /// Exit status; -1 when a signal ended the shell, 124 when `timeout` stopped the command.
  int status = -1;
  /// Captured stdout (with stderr when merged); empty when stdout went to a file of the caller.
  std::string out;
  /// Captured stderr; empty when merged into out.
  std::string err;
};

/// How run_shell runs a command and captures its output.
struct RunOptions {
  /// Where stdout goes (a path, /dev/null, /dev/full); empty: into Run::out.
  std::string stdout_to;
  /// VAR=value assignments placed before the command.
  std::string env;
  /// Stderr joins stdout (`2>&1`, in the order written) in Run::out.
  bool merge_stderr = false;
  /// Time limit in seconds (`timeout`); a command past it ends with status 124.
  int timeout_s = 60;
};

/// Runs a shell command (which may redirect its stdin) with its output in files under temp_root().
Run run_shell(const std::string& command, const RunOptions& options = {});
/// Runs `lpemu ARGS` with a 60 s limit; stdout to `stdout_to` if given; `env`: VAR=value assignments.
Run run_lpemu(const std::string& args, const std::string& stdout_to = "", const std::string& env = "");
/// Runs `lpemu ARGS` with a 60 s limit and stderr merged into Run::out as the command wrote them (`2>&1`).
Run run_lpemu_merged(const std::string& args);

}  // namespace lpemu::test
