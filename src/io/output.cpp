#include "lpemu/io/output.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <system_error>
#include <utility>

#include "lpemu/error.hpp"
#include "lpemu/io/output_transaction.hpp"

namespace lpemu::io {
namespace fs = std::filesystem;
namespace {

std::string errno_text() { return std::strerror(errno); }

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec) && !ec;
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

// Makes a file durable: its data, then the folder entry that names it.
void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) throw IoError(p.string() + ": cannot reopen to sync: " + errno_text());
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && !(directory && (err == EINVAL || err == EROFS))) {
    throw IoError(p.string() + ": fsync failed: " + std::strerror(err));
  }
}

}  // namespace

void check_output(const fs::path& target, const OutputPolicy& policy) {
  if (target.empty()) throw IoError("output path is empty");
  for (const auto& in : policy.inputs) {
    if (!in.empty() && same_file(in, target)) {
      throw IoError(target.string() +
                    ": is also an input of this command; refusing to overwrite it (even with --force)");
    }
  }
  std::error_code ec;
  const auto st = fs::status(target, ec);
  if (fs::is_directory(st)) throw IoError(target.string() + ": is a directory; expected a file name");
  if (fs::is_regular_file(st) && !policy.force) {
    throw IoError(target.string() + ": output exists; pass --force to overwrite it");
  }
}

namespace {
thread_local OutputTransaction* current_transaction = nullptr;

// A free name beside `target` for its replaced copy (created empty; the rename replaces it).
fs::path backup_name(const fs::path& target) {
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmpl = (dir / ("." + target.filename().string() + ".lpemu-old-XXXXXX")).string();
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) throw IoError(target.string() + ": cannot create a temporary file beside it: " + errno_text());
  ::close(fd);
  return tmpl;
}
}  // namespace

OutputTransaction::OutputTransaction() : outer_(current_transaction) { current_transaction = this; }

OutputTransaction::~OutputTransaction() {
  current_transaction = outer_;
  if (done_) return;
  // Newest first: a file written twice gets its first version back, then the original.
  std::error_code ec;
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->folder) {
      fs::remove_all(it->target, ec);
    } else if (it->backup.empty()) {
      fs::remove(it->target, ec);
    } else {
      fs::rename(it->backup, it->target, ec);
    }
  }
}

void OutputTransaction::commit() {
  done_ = true;
  if (outer_ != nullptr) {
    for (auto& e : entries_) outer_->record(std::move(e));
  } else {
    std::error_code ec;
    for (const auto& e : entries_) {
      if (!e.backup.empty()) fs::remove(e.backup, ec);
    }
  }
  entries_.clear();
}

OutputTransaction::Pause::Pause() : saved_(current_transaction) { current_transaction = nullptr; }

OutputTransaction::Pause::~Pause() { current_transaction = saved_; }

OutputTransaction* OutputTransaction::current() { return current_transaction; }

void OutputTransaction::record(Entry e) { entries_.push_back(std::move(e)); }

AtomicFile::AtomicFile(fs::path target, const OutputPolicy& policy) : target_(std::move(target)) {
  check_output(target_, policy);
  std::error_code ec;
  const auto st = fs::status(target_, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {  // a device or FIFO: no rename possible
    in_place_ = true;
    temp_ = target_;
    out_.open(target_, std::ios::binary | std::ios::out);
    if (!out_) throw IoError(target_.string() + ": cannot open for writing: " + errno_text());
    return;
  }
  const fs::path dir = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw IoError(target_.string() + ": folder " + dir.string() + " does not exist");
  std::string tmpl = (dir / ("." + target_.filename().string() + ".lpemu-tmp-XXXXXX")).string();
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) throw IoError(target_.string() + ": cannot create a temporary file beside it: " + errno_text());
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  ::close(fd);
  temp_ = tmpl;
  out_.open(temp_, std::ios::binary | std::ios::out | std::ios::trunc);
  if (!out_) {
    fs::remove(temp_, ec);
    throw IoError(target_.string() + ": cannot open for writing");
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_ && !in_place_) {
    out_.close();
    std::error_code ec;
    fs::remove(temp_, ec);
  }
}

std::ostream& AtomicFile::stream() { return out_; }
const fs::path& AtomicFile::temp_path() const { return temp_; }
const fs::path& AtomicFile::target() const { return target_; }

void AtomicFile::close_stream() {
  if (out_.is_open()) {
    out_.close();
    if (!out_) throw IoError(target_.string() + ": write failed");
  }
}

void AtomicFile::commit() {
  if (out_.is_open()) {
    out_.flush();
    const bool ok = static_cast<bool>(out_);
    out_.close();
    if (!ok || !out_) throw IoError(target_.string() + ": write failed (disk full or device error?)");
  }
  if (in_place_) {
    committed_ = true;
    return;
  }
  fsync_path(temp_, false);
  std::error_code ec;
  OutputTransaction* run = OutputTransaction::current();
  OutputTransaction::Entry undo{target_, {}, false};
  if (run != nullptr && fs::is_regular_file(target_, ec)) {
    undo.backup = backup_name(target_);  // the replaced file, put back if the run fails
    fs::rename(target_, undo.backup, ec);
    if (ec) {
      fs::remove(undo.backup, ec);
      throw IoError(target_.string() + ": cannot set the replaced file aside: " + ec.message());
    }
  }
  fs::rename(temp_, target_, ec);
  if (ec) {
    const std::string why = ec.message();
    if (!undo.backup.empty()) fs::rename(undo.backup, target_, ec);
    throw IoError(target_.string() + ": cannot rename the finished file into place: " + why);
  }
  committed_ = true;
  if (run != nullptr) run->record(std::move(undo));
  fsync_path(target_.has_parent_path() ? target_.parent_path() : fs::path("."), true);
}

void write_file_atomic(const fs::path& target, std::string_view bytes, const OutputPolicy& policy) {
  AtomicFile f(target, policy);
  f.stream().write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.commit();
}

void check_output_dir(const fs::path& dir, const std::string& marker) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  if (!fs::is_directory(dir, ec)) throw IoError(dir.string() + ": exists and is not a folder");
  if (fs::exists(dir / marker, ec)) return;
  if (fs::directory_iterator(dir, ec) != fs::directory_iterator()) {
    throw IoError(dir.string() + ": folder is not empty and was not written by lpemu (no " + marker +
                  "); choose a new or empty folder");
  }
}

std::ifstream open_input(const fs::path& file) {
  std::error_code ec;
  const auto st = fs::status(file, ec);
  if (!fs::exists(st)) throw IoError(file.string() + ": cannot open input: no such file");
  if (fs::is_directory(st))
    throw IoError(file.string() + ": cannot open input: is a directory; expected a file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(file.string() + ": cannot open for reading: " + errno_text());
  return in;
}

std::string read_input(const fs::path& file, std::size_t max_bytes) {
  std::ifstream in = open_input(file);
  std::string out;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    out.append(buf, static_cast<std::size_t>(in.gcount()));
    if (out.size() > max_bytes) {
      throw IoError(file.string() + ": larger than " + std::to_string(max_bytes) +
                    " bytes; expected a regular text file");
    }
  }
  if (in.bad()) throw IoError(file.string() + ": read failed");
  return out;
}

InputFile::InputFile(fs::path file) : path_(std::move(file)) {
  open_input(path_);  // the checks and messages of every input
  if (!fs::is_regular_file(path_))
    throw IoError(path_.string() + ": not a regular file; pipe a stream through stdin ('-') instead");
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw IoError(path_.string() + ": cannot open for reading: " + errno_text());
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t InputFile::read_at(std::uint64_t offset, void* to, std::size_t bytes) const {
  std::size_t got = 0;
  while (got < bytes) {
    const ::ssize_t r =
        ::pread(fd_, static_cast<char*>(to) + got, bytes - got, static_cast<::off_t>(offset + got));
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      throw IoError(path_.string() + ": read failed at byte " + std::to_string(offset + got) + ": " +
                    errno_text());
    }
    got += static_cast<std::size_t>(r);
  }
  return got;
}

std::size_t input_size(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::numeric_limits<std::size_t>::max();
  const auto n = fs::file_size(file, ec);
  return ec ? std::numeric_limits<std::size_t>::max() : static_cast<std::size_t>(n);
}

void flush_stdout() {
  std::cout.flush();
  const bool ok = static_cast<bool>(std::cout) && std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (!ok) throw IoError("<stdout>: write failed (" + errno_text() + ")");
}

void create_output_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec)) {
    throw IoError(dir.string() + ": not a directory: expected a folder for the outputs (or a new name)");
  }
  // The folders that do not exist yet, outermost first: the ones a failed run removes again.
  std::vector<fs::path> made;
  for (fs::path p = fs::absolute(dir, ec).lexically_normal(); !p.empty() && !fs::exists(p, ec);
       p = p.parent_path()) {
    made.insert(made.begin(), p);
    if (p == p.parent_path()) break;
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(dir.string() + ": cannot create the output folder: " + ec.message());
  if (OutputTransaction* run = OutputTransaction::current(); run != nullptr && !made.empty()) {
    run->record({made.front(), {}, true});  // removing the outermost removes the rest
  }
}

}  // namespace lpemu::io
