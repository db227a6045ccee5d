#include "support/test_support.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <vector>

namespace lpemu::test {

std::string source_path(const std::string& relative) {
  return std::string(LPEMU_SOURCE_DIR) + "/" + relative;
}

std::string lpemu_binary() { return std::string(LPEMU_CLI_EMULATOR) + "'" + LPEMU_BINARY + "'"; }

std::string hex32(float x) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", std::bit_cast<std::uint32_t>(x));
  return buf;
}

std::string hex64(double x) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx",
                static_cast<unsigned long long>(std::bit_cast<std::uint64_t>(x)));
  return buf;
}

bool same_bits_or_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) {
    return std::isnan(a) && std::isnan(b) && std::signbit(a) == std::signbit(b);
  }
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

namespace {

// mkdtemp gives a name no other process (or checkout, or container sharing the folder) holds; the
// pid in it says whose it is. Only the process that made it removes it (not a forked child).
struct Root {
  fs::path dir;
  pid_t owner = ::getpid();
  Root() {
    std::string name =
        (fs::temp_directory_path() / ("lpemu-tests-" + std::to_string(owner) + "-XXXXXX")).string();
    std::vector<char> buf(name.begin(), name.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) {
      throw std::runtime_error(name + ": cannot make the tests' temporary folder");
    }
    dir = buf.data();
  }
  ~Root() {
    if (::getpid() != owner) return;
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  Root(const Root&) = delete;
  Root& operator=(const Root&) = delete;
};

std::atomic<unsigned> g_counter{0};

std::string quoted(const std::string& path) {
  std::string q = "'";
  for (const char c : path) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

const fs::path& temp_root() {
  static const Root root;
  return root.dir;
}

Scratch::Scratch(const std::string& name) : dir(temp_root() / (name + "-" + std::to_string(g_counter++))) {
  fs::remove_all(dir);
  fs::create_directories(dir);
}

Scratch::~Scratch() {
  std::error_code ec;
  fs::remove_all(dir, ec);
}

namespace {

// The time limit guards against hangs; a command built with AddressSanitizer runs several times
// slower (and slower still on a loaded machine), so its limit is five times as long.
constexpr int kTimeScale = kSanitized ? 5 : 1;

}  // namespace

Run run_shell(const std::string& command, const RunOptions& options) {
  const std::string base = (temp_root() / ("run-" + std::to_string(g_counter++))).string();
  const std::string out = options.stdout_to.empty() ? base + ".out" : options.stdout_to;
  const std::string err = base + ".err";
  const std::string cmd = options.env + " timeout " + std::to_string(options.timeout_s * kTimeScale) + " " +
                          command + " >" + quoted(out) +
                          (options.merge_stderr ? " 2>&1" : " 2>" + quoted(err));
  Run r;
  const int raw = std::system(cmd.c_str());
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  if (options.stdout_to.empty()) r.out = slurp(out);
  if (!options.merge_stderr) r.err = slurp(err);
  std::error_code ec;
  fs::remove(base + ".out", ec);
  fs::remove(err, ec);
  return r;
}

Run run_lpemu(const std::string& args, const std::string& stdout_to, const std::string& env) {
  RunOptions o;
  o.stdout_to = stdout_to;
  o.env = env;
  return run_shell(lpemu_binary() + " " + args, o);
}

Run run_lpemu_merged(const std::string& args) {
  RunOptions o;
  o.merge_stderr = true;
  return run_shell(lpemu_binary() + " " + args, o);
}

}  // namespace lpemu::test
