#include "lpemu/io/hdf5.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <ostream>
#include <set>

#include <fcntl.h>
#include <unistd.h>

#include <H5Cpp.h>

#include "io/h5_check.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/npy.hpp"
#include "lpemu/io/output.hpp"

namespace lpemu::io {
namespace {

// The HDF5 library is not thread-safe in Debian's serial build: serialise every call.
std::recursive_mutex& h5_mutex() {
  static std::recursive_mutex m;
  return m;
}

// Debian's libhdf5 is built thread-safe (H5_HAVE_THREADSAFE), which makes its automatic error
// printing a setting of each thread: turned off once per thread that calls libhdf5 (a model's
// datasets are read on oneTBB's worker threads, which printed libhdf5's error stack to stderr
// for a corrupt dataset).
//
// The same build frees a thread's error stack when the thread ends but not the messages on it, so
// the stack is also cleared then (LeakSanitizer found the messages of a thread's last failure).
struct ClearErrorStackAtExit {
  ClearErrorStackAtExit() = default;
  ClearErrorStackAtExit(const ClearErrorStackAtExit&) = delete;
  ClearErrorStackAtExit& operator=(const ClearErrorStackAtExit&) = delete;
  ~ClearErrorStackAtExit() {
    const std::lock_guard<std::recursive_mutex> lock(h5_mutex());
    H5Eclear2(H5E_DEFAULT);
  }
};

void quiet() {
  thread_local const bool once = [] {
    H5::Exception::dontPrint();
    return true;
  }();
  thread_local const ClearErrorStackAtExit clear_at_exit;
  (void)once;
  (void)clear_at_exit;
}

std::vector<std::string> split_path(const std::string& name) {
  std::vector<std::string> parts;
  std::string cur;
  for (const char c : name) {
    if (c == '/') {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  return parts;
}

// The memory of a file held by HDF5's core driver, taken over when the file closes instead of
// freed, so that its bytes go to disk without a second copy (H5Pset_file_image_callbacks, HDF5
// Reference Manual; the callbacks otherwise allocate, copy and free as the driver would).
struct ImageCapture {
  bool take = false;         ///< set just before the file is closed for its bytes
  void* mem = nullptr;       ///< the taken buffer (malloc'ed), owned by the caller afterwards
  void* grown = nullptr;     ///< the buffer the driver grows,
  std::size_t capacity = 0;  ///< and its allocated size (the driver's size, or more)
};

void* image_malloc(std::size_t size, H5FD_file_image_op_t /*op*/, void* /*udata*/) {
  return std::malloc(size);
}
void* image_memcpy(void* dest, const void* src, std::size_t size, H5FD_file_image_op_t /*op*/,
                   void* /*udata*/) {
  return std::memcpy(dest, src, size);
}
// The core driver grows its buffer by a fixed increment, each time by a realloc that may copy the
// whole buffer (glibc copies blocks below its adaptive mmap threshold, up to 32 MiB). Allocating
// half as much again as asked keeps the copies linear in the file's size.
void* image_realloc(void* ptr, std::size_t size, H5FD_file_image_op_t op, void* udata) {
  auto* capture = static_cast<ImageCapture*>(udata);
  if (op != H5FD_FILE_IMAGE_OP_FILE_RESIZE) return std::realloc(ptr, size);
  if (ptr != nullptr && ptr == capture->grown && size <= capture->capacity) return ptr;
  const std::size_t capacity = std::max(size, capture->capacity + capture->capacity / 2);
  void* p = std::realloc(ptr, capacity);
  if (p == nullptr) return nullptr;
  capture->grown = p;
  capture->capacity = capacity;
  return p;
}
herr_t image_free(void* ptr, H5FD_file_image_op_t op, void* udata) {
  auto* capture = static_cast<ImageCapture*>(udata);
  if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && capture->take && capture->mem == nullptr) {
    capture->mem = ptr;
  } else {
    std::free(ptr);
  }
  return 0;
}
void* udata_copy(void* udata) { return udata; }  // one capture, shared by every copy of the list
herr_t udata_free(void* /*udata*/) { return 0; }

std::vector<std::size_t> dims_of(const H5::DataSpace& space) {
  const int rank = space.getSimpleExtentNdims();
  std::vector<hsize_t> d(static_cast<std::size_t>(rank));
  if (rank > 0) space.getSimpleExtentDims(d.data());
  return {d.begin(), d.end()};
}

}  // namespace

std::size_t Tensor::count() const {
  std::size_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

std::optional<DatasetRef> parse_dataset_ref(const std::string& text) {
  for (const std::string ext : {".h5:", ".hdf5:", ".he5:"}) {
    const auto pos = text.find(ext);
    if (pos != std::string::npos) {
      DatasetRef r{text.substr(0, pos + ext.size() - 1), text.substr(pos + ext.size())};
      if (r.dataset.empty() || r.dataset[0] != '/') r.dataset = "/" + r.dataset;
      return r;
    }
  }
  return std::nullopt;
}

struct H5File::Impl {
  std::filesystem::path path;
  H5::H5File file;
  mutable std::set<haddr_t> attributes_checked;  // object headers whose attribute messages passed
  int fd = -1;  ///< the file opened again for raw reads (read-only files only; -1 otherwise)
  /// For a file opened for writing (held in memory by HDF5's core driver): where close() puts it.
  std::filesystem::path target;
  bool in_memory = false;
  ImageCapture capture;  ///< the core driver's buffer taken at close (in-memory files)

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  [[noreturn]] void fail(const std::string& obj, const std::string& what) const {
    throw IoError(path.string() + ":" + obj + ": " + what);
  }

  // Runs one library call; an HDF5 failure (H5::Exception is not a std::exception) becomes an
  // IoError naming the file and object.
  template <class F>
  auto guard(const std::string& obj, F&& f) const -> decltype(f()) {
    quiet();
    try {
      return f();
    } catch (const H5::Exception& e) {
      fail(obj.empty() ? "/" : obj, "HDF5 error in " + e.getFuncName() + ": " + e.getDetailMsg() +
                                        " (corrupt file, wrong object kind, or disk full?)");
    }
  }

  // The number of elements `ds` declares, checked against the file before anything is allocated:
  // the shape must not overflow, the stored bytes must fit in the file, and unchunked data must
  // lie in the file (chunked data may be compressed, at most 1032:1 as deflate allows).
  std::size_t checked_count(const H5::DataSet& ds, const std::string& name) const {
    constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
    // A null dataspace holds no element (its rank of 0 would otherwise read as a scalar).
    if (ds.getSpace().getSimpleExtentType() == H5S_NULL)
      fail(name, "is empty (a null dataspace): expected an array");
    std::size_t n = 1;
    for (const auto d : dims_of(ds.getSpace())) {
      if (d != 0 && n > kMax / d) fail(name, "declared shape overflows 64 bits (corrupt file?)");
      n *= d;
    }
    const std::size_t item = ds.getDataType().getSize();
    if (item != 0 && n > kMax / item) fail(name, "declared size overflows 64 bits (corrupt file?)");
    const std::uintmax_t file_bytes = size_in_bytes();
    const hsize_t stored = ds.getStorageSize();
    if (stored > file_bytes) {
      fail(name, "declares " + std::to_string(stored) + " stored bytes but the file holds " +
                     std::to_string(file_bytes) + " (corrupt or truncated file?)");
    }
    const std::uintmax_t logical = static_cast<std::uintmax_t>(n) * item;
    const bool chunked = ds.getCreatePlist().getLayout() == H5D_CHUNKED;
    const std::uintmax_t room = chunked ? std::max<std::uintmax_t>(stored, 1) * 1032 : file_bytes;
    if (logical > room) {
      fail(name, "declares " + std::to_string(n) + " elements of " + std::to_string(item) + " bytes (" +
                     std::to_string(logical) + " bytes) but the file holds " + std::to_string(file_bytes) +
                     (chunked ? " (" + std::to_string(stored) + " stored)" : std::string()) +
                     " (corrupt or truncated file?)");
    }
    return n;
  }

  // The file's size: on disk, or of the image in memory.
  std::uintmax_t size_in_bytes() const {
    if (!in_memory) return std::filesystem::file_size(path);
    hsize_t n = 0;
    if (H5Fget_filesize(file.getId(), &n) < 0) fail("/", "cannot tell the size of the file in memory");
    return n;
  }

  // Before libhdf5 follows the global-heap references of a variable-length string dataset (a
  // corrupt reference or heap makes it read out of bounds), checks each reference against the
  // file: a contiguous dataset whose references name existing objects of a well-formed "GCOL"
  // collection inside the file, each string no longer than its heap object.
  void check_vlen_strings(const H5::DataSet& ds, const std::string& name, std::size_t n) const {
    if (n == 0 || in_memory) return;  // a file being written is lpemu's own
    if (ds.getCreatePlist().getLayout() != H5D_CONTIGUOUS) {
      fail(name, "variable-length strings not stored contiguously; expected a contiguous dataset");
    }
    std::size_t sizeof_addr = 0, sizeof_size = 0;
    file.getCreatePlist().getSizes(sizeof_addr, sizeof_size);
    const hsize_t base = file.getCreatePlist().getUserblock();
    if (sizeof_addr != 8 || sizeof_size != 8) fail(name, "expected 8-byte file addresses and lengths");
    const haddr_t at = H5Dget_offset(ds.getId());
    const std::uintmax_t file_bytes = std::filesystem::file_size(path);
    constexpr std::size_t kRef = 4 + 8 + 4;  // sequence length, collection address, object index
    if (at == HADDR_UNDEF || base + at > file_bytes || n > (file_bytes - base - at) / kRef) {
      fail(name, "string references lie outside the file (corrupt file?)");
    }
    std::string refs(n * kRef, '\0');
    std::ifstream in(path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(base + at));
    in.read(refs.data(), static_cast<std::streamsize>(refs.size()));
    if (static_cast<std::size_t>(in.gcount()) != refs.size()) fail(name, "cannot read the string references");
    detail::check_heap_refs(path, base, name, refs, n);
  }

  // Before libhdf5 decodes an object's attribute messages (it copies by their sizes unchecked), checks
  // them against the file, once per object header; files open for writing are lpemu's own.
  void check_attributes(const H5::H5Object& o, const std::string& name) const {
    unsigned intent = 0;
    if (H5Fget_intent(file.getId(), &intent) < 0 || intent != H5F_ACC_RDONLY) return;
    H5O_info_t info;
    if (H5Oget_info2(o.getId(), &info, H5O_INFO_BASIC) < 0) fail(name, "cannot locate the object header");
    if (!attributes_checked.insert(info.addr).second) return;
    std::size_t sizeof_addr = 0, sizeof_size = 0;
    file.getCreatePlist().getSizes(sizeof_addr, sizeof_size);
    if (sizeof_addr != 8 || sizeof_size != 8) fail(name, "expected 8-byte file addresses and lengths");
    detail::check_attribute_messages(path, file.getCreatePlist().getUserblock(), info.addr,
                                     name.empty() ? "/" : name);
  }

  H5::DataSet dataset(const std::string& name) const {
    if (!exists(name)) fail(name, "no such dataset");
    try {
      return file.openDataSet(name);
    } catch (const H5::Exception&) {
      fail(name, "not a dataset");
    }
  }

  // Each group on the way is checked (check_attributes) before libhdf5 follows its links.
  bool exists(const std::string& name) const {
    std::string cur;
    for (const auto& part : split_path(name)) {
      const std::string parent = cur.empty() ? "/" : cur;
      H5O_info_t info;
      if (H5Oget_info_by_name2(file.getId(), parent.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0 ||
          info.type != H5O_TYPE_GROUP) {
        return false;
      }
      check_attributes(file.openGroup(parent), parent);
      cur += "/" + part;
      if (H5Lexists(file.getId(), cur.c_str(), H5P_DEFAULT) <= 0) return false;
    }
    return true;
  }

  H5::H5Object* object(const std::string& obj, std::unique_ptr<H5::Group>& g,
                       std::unique_ptr<H5::DataSet>& d) const {
    if (obj.empty() || obj == "/") {
      g = std::make_unique<H5::Group>(file.openGroup("/"));
      check_attributes(*g, obj);
      return g.get();
    }
    if (!exists(obj)) fail(obj, "no such object");
    const H5O_type_t t = file.childObjType(obj);
    if (t == H5O_TYPE_GROUP) {
      g = std::make_unique<H5::Group>(file.openGroup(obj));
      check_attributes(*g, obj);
      return g.get();
    }
    d = std::make_unique<H5::DataSet>(file.openDataSet(obj));
    check_attributes(*d, obj);
    return d.get();
  }

  // An attribute read as one value must hold one (an array used to be read into a scalar).
  void require_scalar(const H5::Attribute& a, const std::string& obj, const std::string& name) const {
    const hssize_t n = a.getSpace().getSimpleExtentNpoints();
    if (n != 1) fail(obj, "attribute '" + name + "' holds " + std::to_string(n) + " values: expected one");
  }

  // A fixed- or floating-point type must keep its bit fields inside its size (HDF5 File Format
  // Specification 3.0, IV.A.2.d, the datatype message's fixed-point and floating-point properties:
  // bit offset + precision <= 8 x size; sign, exponent and mantissa inside the precision). libhdf5
  // 1.10 converts by those fields unchecked: a corrupt bit offset of 65280 in an 8-byte integer
  // attribute made H5T__conv_i_i read 8 KB past the value (garbage, or SIGSEGV in H5T__bit_find).
  void check_numeric_type(const H5::AbstractDs& object, const std::string& obj,
                          const std::string& what) const {
    const H5::DataType t = object.getDataType();
    const hid_t id = t.getId();
    const H5T_class_t cls = H5Tget_class(id);
    if (cls != H5T_INTEGER && cls != H5T_FLOAT) return;
    const std::size_t size = H5Tget_size(id);
    const int offset = H5Tget_offset(id);
    const std::size_t precision = H5Tget_precision(id);
    bool ok =
        size > 0 && offset >= 0 && precision >= 1 && static_cast<std::size_t>(offset) + precision <= 8 * size;
    std::string fields;
    if (ok && cls == H5T_FLOAT) {
      std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
      ok = H5Tget_fields(id, &spos, &epos, &esize, &mpos, &msize) >= 0 && spos < precision && esize >= 1 &&
           esize <= 63 && epos + esize <= precision && mpos + msize <= precision;
      fields = ", sign bit " + std::to_string(spos) + ", exponent " + std::to_string(epos) + "+" +
               std::to_string(esize) + ", mantissa " + std::to_string(mpos) + "+" + std::to_string(msize);
    }
    if (!ok) {
      fail(obj, what + " has an impossible " + (cls == H5T_FLOAT ? "floating-point" : "integer") + " type (" +
                    std::to_string(size) + " bytes, bit offset " + std::to_string(offset) + ", precision " +
                    std::to_string(precision) + fields + ") (corrupt file?)");
    }
  }

  H5::Attribute attribute(const std::string& obj, const std::string& name, std::unique_ptr<H5::Group>& g,
                          std::unique_ptr<H5::DataSet>& d) const {
    H5::H5Object* o = object(obj, g, d);
    if (!o->attrExists(name)) fail(obj, "missing attribute '" + name + "'");
    return o->openAttribute(name);
  }

  void ensure_group(const std::string& group) {
    std::string cur;
    for (const auto& part : split_path(group)) {
      cur += "/" + part;
      if (H5Lexists(file.getId(), cur.c_str(), H5P_DEFAULT) <= 0) file.createGroup(cur);
    }
  }

  template <class T>
  void write(const std::string& name, const std::vector<std::size_t>& shape, const T* data,
             const H5::DataType& mem, const H5::DataType& disk) {
    guard(name, [&] {
      const auto parts = split_path(name);
      if (parts.empty()) fail(name, "empty dataset name");
      std::string parent;
      for (std::size_t i = 0; i + 1 < parts.size(); ++i) parent += "/" + parts[i];
      if (!parent.empty()) ensure_group(parent);
      unlink_dataset(name);
      std::vector<hsize_t> dims(shape.begin(), shape.end());
      H5::DataSpace space(static_cast<int>(dims.size()), dims.data());
      H5::DataSet ds = file.createDataSet(name, disk, space);
      ds.write(data, mem);
    });
  }

  // Removes an existing dataset before it is rewritten; a group is never replaced by a dataset
  // (that would delete everything under it).
  void unlink_dataset(const std::string& name) {
    if (!exists(name)) return;
    if (file.childObjType(name) != H5O_TYPE_DATASET)
      fail(name, "is a group, not a dataset; refusing to replace it");
    file.unlink(name);
  }
};

H5File::H5File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
H5File::H5File(H5File&&) noexcept = default;
H5File& H5File::operator=(H5File&&) noexcept = default;
H5File::~H5File() {
  std::lock_guard lock(h5_mutex());
  impl_.reset();
}

H5File H5File::open(const std::filesystem::path& file) {
  std::lock_guard lock(h5_mutex());
  quiet();
  if (!std::filesystem::exists(file)) throw IoError(file.string() + ": no such file");
  auto impl = std::make_unique<Impl>();
  impl->path = file;
  try {
    impl->file = H5::H5File(file.string(), H5F_ACC_RDONLY);
  } catch (const H5::Exception&) {
    throw IoError(file.string() + ": not a readable HDF5 file");
  }
  impl->fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);  // NOLINT(cppcoreguidelines-pro-type-vararg)
  return H5File(std::move(impl));
}

H5File H5File::open_rw(const std::filesystem::path& file, const std::filesystem::path& shown) {
  std::error_code ec;
  return open_in_memory(file, shown, std::filesystem::is_regular_file(file, ec));
}

H5File H5File::open_in_memory(const std::filesystem::path& file, const std::filesystem::path& shown,
                              bool load) {
  // Read before taking the lock: the bytes of the existing file become the image HDF5 starts from.
  std::string bytes = load ? read_input(file, std::numeric_limits<std::size_t>::max()) : std::string();
  std::lock_guard lock(h5_mutex());
  quiet();
  auto impl = std::make_unique<Impl>();
  impl->path = shown.empty() ? file : shown;
  impl->target = file;
  impl->in_memory = true;
  try {
    // HDF5's core driver (HDF5 User's Guide, "File Drivers": H5FD_CORE) with no backing store:
    // the file lives in memory, grown 1 MiB at a time, and libhdf5 never writes to disk, so a full
    // disk can never fail one of its writes (libhdf5 1.10 leaves a file whose flush failed half
    // closed, and its exit handler then crashes on it). close() puts the bytes on disk.
    H5::FileAccPropList fapl;
    fapl.setCore(std::size_t{1} << 20, false);
    H5FD_file_image_callbacks_t callbacks{image_malloc, image_memcpy, image_realloc, image_free,
                                          udata_copy,   udata_free,   &impl->capture};
    if (H5Pset_file_image_callbacks(fapl.getId(), &callbacks) < 0)
      throw IoError(impl->path.string() + ": cannot set up an HDF5 file in memory");
    // The name is a label only: the file is created in memory or opened from the image.
    const std::string label = "lpemu-in-memory:" + file.string();
    if (load) {
      if (H5Pset_file_image(fapl.getId(), const_cast<char*>(bytes.data()), bytes.size()) < 0)  // NOLINT
        throw IoError(impl->path.string() + ": cannot load the file into memory for writing");
      bytes = std::string();  // the property list holds its own copy
      impl->file = H5::H5File(label, H5F_ACC_RDWR, H5::FileCreatPropList::DEFAULT, fapl);
    } else {
      impl->file = H5::H5File(label, H5F_ACC_TRUNC, H5::FileCreatPropList::DEFAULT, fapl);
    }
  } catch (const H5::Exception&) {
    throw IoError(impl->path.string() + (load ? ": not a readable HDF5 file; cannot add to it"
                                              : ": cannot create an HDF5 file in memory"));
  }
  return H5File(std::move(impl));
}

const std::filesystem::path& H5File::path() const { return impl_->path; }

void H5File::close() {
  if (impl_->in_memory) {
    AtomicFile out(impl_->target, OutputPolicy{true, {}});
    close_into(out.stream());
    out.commit();
    return;
  }
  std::lock_guard lock(h5_mutex());
  impl_->guard("/", [&] { impl_->file.close(); });
}

void H5File::close_into(std::ostream& out) {
  std::unique_ptr<char, decltype(&std::free)> mem(nullptr, &std::free);
  std::size_t n = 0;
  {
    std::lock_guard lock(h5_mutex());
    if (!impl_->in_memory) throw IoError(impl_->path.string() + ": not a file opened for writing");
    impl_->guard("/", [&] {
      // A flush releases the space aggregators, so the end of allocated space (the image's size,
      // which H5Fget_file_image reports without copying) is final; closing then hands over the
      // driver's buffer, whose first n bytes are the file.
      impl_->file.flush(H5F_SCOPE_GLOBAL);
      const ssize_t size = H5Fget_file_image(impl_->file.getId(), nullptr, 0);
      if (size <= 0) impl_->fail("/", "cannot tell the size of the file in memory");
      n = static_cast<std::size_t>(size);
      impl_->capture.take = true;
      impl_->file.close();
    });
    mem.reset(static_cast<char*>(impl_->capture.mem));
    impl_->capture = ImageCapture{};
    impl_->in_memory = false;
  }
  if (mem == nullptr)
    throw IoError(impl_->path.string() + ": HDF5 did not hand over the file's bytes at close");
  out.write(mem.get(), static_cast<std::streamsize>(n));
}

bool H5File::exists(const std::string& name) const {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(name, [&] { return impl_->exists(name); });
}

std::vector<std::string> H5File::list(const std::string& group) const {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(group, [&] {
    if (!impl_->exists(group) && group != "/") impl_->fail(group, "no such group");
    try {
      H5::Group g = impl_->file.openGroup(group);
      std::vector<std::string> out;
      for (hsize_t i = 0; i < g.getNumObjs(); ++i) out.push_back(g.getObjnameByIdx(i));
      std::sort(out.begin(), out.end());
      return out;
    } catch (const H5::Exception&) {
      impl_->fail(group, "not a group");
    }
  });
}

std::vector<std::size_t> H5File::shape(const std::string& dataset) const {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(dataset, [&] { return dims_of(impl_->dataset(dataset).getSpace()); });
}

Tensor H5File::read_floats(const std::string& dataset) const {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(dataset, [&] {
    H5::DataSet ds = impl_->dataset(dataset);
    const H5T_class_t cls = ds.getTypeClass();
    if (cls != H5T_FLOAT && cls != H5T_INTEGER) impl_->fail(dataset, "expected a numeric dataset");
    impl_->check_numeric_type(ds, dataset, "the dataset");
    Tensor t;
    const std::size_t n = impl_->checked_count(ds, dataset);
    t.shape = dims_of(ds.getSpace());
    t.data.resize(n);
    try {
      ds.read(t.data.data(), H5::PredType::NATIVE_FLOAT);
    } catch (const H5::Exception&) {
      impl_->fail(dataset, "cannot read as float (corrupt or truncated data?)");
    }
    return t;
  });
}

void H5File::read_floats_into(const std::string& dataset, std::span<float> out) const {
  // Under the lock: the checks, and either the raw extent of a contiguous native float32 dataset
  // (read below without the lock) or the whole read through libhdf5.
  std::uint64_t offset = 0;
  const bool raw = [&] {
    std::lock_guard lock(h5_mutex());
    return impl_->guard(dataset, [&] {
      H5::DataSet ds = impl_->dataset(dataset);
      const H5T_class_t cls = ds.getTypeClass();
      if (cls != H5T_FLOAT && cls != H5T_INTEGER) impl_->fail(dataset, "expected a numeric dataset");
      impl_->check_numeric_type(ds, dataset, "the dataset");
      const std::size_t n = impl_->checked_count(ds, dataset);
      if (n != out.size()) {
        impl_->fail(dataset,
                    "holds " + std::to_string(n) + " elements, expected " + std::to_string(out.size()));
      }
      const haddr_t at = impl_->fd >= 0 && n > 0 && ds.getDataType() == H5::PredType::NATIVE_FLOAT &&
                                 ds.getCreatePlist().getLayout() == H5D_CONTIGUOUS &&
                                 impl_->file.getCreatePlist().getUserblock() == 0
                             ? H5Dget_offset(ds.getId())
                             : HADDR_UNDEF;
      if (at != HADDR_UNDEF && ds.getStorageSize() == out.size_bytes() &&
          at <= std::filesystem::file_size(impl_->path) - out.size_bytes()) {
        offset = at;
        return true;
      }
      try {
        if (n > 0) ds.read(out.data(), H5::PredType::NATIVE_FLOAT);
      } catch (const H5::Exception&) {
        impl_->fail(dataset, "cannot read as float (corrupt or truncated data?)");
      }
      return false;
    });
  }();
  if (!raw) return;
  // The stored bytes are the values (same type, byte order, no filters): copy them from the file
  // straight into `out`, in parallel with other threads' reads.
  auto* dst = reinterpret_cast<char*>(out.data());  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
  std::size_t done = 0;
  while (done < out.size_bytes()) {
    const ssize_t got =
        ::pread(impl_->fd, dst + done, out.size_bytes() - done, static_cast<off_t>(offset + done));
    if (got <= 0) {
      throw IoError(impl_->path.string() + ":" + dataset + ": cannot read its " +
                    std::to_string(out.size_bytes()) + " bytes (truncated file or read error)");
    }
    done += static_cast<std::size_t>(got);
  }
}

std::optional<Codes16> H5File::read_codes16(const std::string& dataset) const {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(dataset, [&]() -> std::optional<Codes16> {
    H5::DataSet ds = impl_->dataset(dataset);
    if (ds.getTypeClass() != H5T_FLOAT) return std::nullopt;
    H5::FloatType ft = ds.getFloatType();
    std::string norm;
    if (ft.getSize() != 2 || ft.getPrecision() != 16 || ft.getOffset() != 0 ||
        ft.getNorm(norm) != H5T_NORM_IMPLIED) {
      return std::nullopt;
    }
    std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    ft.getFields(spos, epos, esize, mpos, msize);
    const std::size_t bias = ft.getEbias();
    Codes16 c;
    if (spos == 15 && epos == 7 && esize == 8 && mpos == 0 && msize == 7 && bias == 127) {
      c.kind = "bf16";
    } else if (spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 && bias == 15) {
      c.kind = "fp16";
    } else {
      return std::nullopt;
    }
    const std::size_t n = impl_->checked_count(ds, dataset);
    c.shape = dims_of(ds.getSpace());
    c.codes.resize(n);
    // The file's own type in this machine's byte order: HDF5 copies (or byte-swaps) the codes.
    H5::FloatType mem;
    mem.copy(ft);
    mem.setOrder(H5::PredType::NATIVE_UINT16.getOrder());
    try {
      ds.read(c.codes.data(), mem);
    } catch (const H5::Exception&) {
      impl_->fail(dataset, "cannot read its 16-bit codes (corrupt or truncated data?)");
    }
    return c;
  });
}

std::vector<double> H5File::read_doubles(const std::string& dataset, std::vector<std::size_t>* shape) const {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(dataset, [&] {
    H5::DataSet ds = impl_->dataset(dataset);
    const H5T_class_t cls = ds.getTypeClass();
    if (cls != H5T_FLOAT && cls != H5T_INTEGER) impl_->fail(dataset, "expected a numeric dataset");
    impl_->check_numeric_type(ds, dataset, "the dataset");
    const std::size_t n = impl_->checked_count(ds, dataset);
    if (shape != nullptr) *shape = dims_of(ds.getSpace());
    std::vector<double> out(n);
    try {
      ds.read(out.data(), H5::PredType::NATIVE_DOUBLE);
    } catch (const H5::Exception&) {
      impl_->fail(dataset, "cannot read as float64");
    }
    return out;
  });
}

std::vector<std::int64_t> H5File::read_ints(const std::string& dataset,
                                            std::vector<std::size_t>* shape) const {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(dataset, [&] {
    H5::DataSet ds = impl_->dataset(dataset);
    if (ds.getTypeClass() != H5T_INTEGER) impl_->fail(dataset, "expected an integer dataset");
    impl_->check_numeric_type(ds, dataset, "the dataset");
    const std::size_t n = impl_->checked_count(ds, dataset);
    if (shape != nullptr) *shape = dims_of(ds.getSpace());
    std::vector<std::int64_t> out(n);
    try {
      ds.read(out.data(), H5::PredType::NATIVE_INT64);
    } catch (const H5::Exception&) {
      impl_->fail(dataset, "cannot read as int64");
    }
    return out;
  });
}

std::vector<std::string> H5File::read_strings(const std::string& dataset) const {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(dataset, [&] {
    H5::DataSet ds = impl_->dataset(dataset);
    if (ds.getTypeClass() != H5T_STRING) impl_->fail(dataset, "expected a string dataset");
    H5::StrType type = ds.getStrType();
    const std::size_t n = impl_->checked_count(ds, dataset);
    std::vector<std::string> out(n);
    if (type.isVariableStr()) {
      impl_->check_vlen_strings(ds, dataset, n);
      std::vector<char*> raw(n, nullptr);
      ds.read(raw.data(), type);
      for (std::size_t i = 0; i < n; ++i) out[i] = raw[i] != nullptr ? raw[i] : "";
      H5::DataSet::vlenReclaim(raw.data(), type, ds.getSpace());
    } else {
      const std::size_t len = type.getSize();
      std::vector<char> raw(n * len);
      ds.read(raw.data(), type);
      for (std::size_t i = 0; i < n; ++i) {
        std::string s(raw.data() + i * len, len);
        s.erase(std::find(s.begin(), s.end(), '\0'), s.end());
        out[i] = s;
      }
    }
    return out;
  });
}

bool H5File::has_attr(const std::string& obj, const std::string& name) const {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(obj, [&] {
    if (obj != "/" && !impl_->exists(obj)) return false;
    std::unique_ptr<H5::Group> g;
    std::unique_ptr<H5::DataSet> d;
    return impl_->object(obj, g, d)->attrExists(name);
  });
}

double H5File::attr_double(const std::string& obj, const std::string& name) const {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(obj, [&] {
    std::unique_ptr<H5::Group> g;
    std::unique_ptr<H5::DataSet> d;
    H5::Attribute a = impl_->attribute(obj, name, g, d);
    impl_->require_scalar(a, obj, name);
    if (a.getTypeClass() != H5T_FLOAT && a.getTypeClass() != H5T_INTEGER) {
      impl_->fail(obj, "attribute '" + name + "' is not numeric");
    }
    impl_->check_numeric_type(a, obj, "attribute '" + name + "'");
    double v = 0;
    a.read(H5::PredType::NATIVE_DOUBLE, &v);
    return v;
  });
}

std::int64_t H5File::attr_int(const std::string& obj, const std::string& name) const {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(obj, [&] {
    std::unique_ptr<H5::Group> g;
    std::unique_ptr<H5::DataSet> d;
    H5::Attribute a = impl_->attribute(obj, name, g, d);
    impl_->require_scalar(a, obj, name);
    if (a.getTypeClass() != H5T_INTEGER) impl_->fail(obj, "attribute '" + name + "' is not an integer");
    impl_->check_numeric_type(a, obj, "attribute '" + name + "'");
    std::int64_t v = 0;
    a.read(H5::PredType::NATIVE_INT64, &v);
    return v;
  });
}

std::string H5File::attr_string(const std::string& obj, const std::string& name) const {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(obj, [&] {
    std::unique_ptr<H5::Group> g;
    std::unique_ptr<H5::DataSet> d;
    H5::Attribute a = impl_->attribute(obj, name, g, d);
    impl_->require_scalar(a, obj, name);
    if (a.getTypeClass() != H5T_STRING) impl_->fail(obj, "attribute '" + name + "' is not a string");
    std::string v;
    a.read(a.getStrType(), v);
    return v;
  });
}

void H5File::write_floats(const std::string& dataset, const std::vector<std::size_t>& shape,
                          const float* data) {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(dataset, [&] {
    impl_->write(dataset, shape, data, H5::PredType::NATIVE_FLOAT, H5::PredType::IEEE_F32LE);
  });
}

void H5File::write_codes16(const std::string& dataset, const std::vector<std::size_t>& shape,
                           const std::uint16_t* codes, const std::string& kind) {
  if (kind != "bf16" && kind != "fp16") {
    throw IoError(path().string() + ": dataset '" + dataset + "': 16-bit kind '" + kind +
                  "': expected bf16 or fp16");
  }
  std::lock_guard lock(h5_mutex());
  return impl_->guard(dataset, [&] {
    // A 16-bit float type: bf16 is the top half of IEEE binary32, fp16 is binary16; little-endian
    // on disk, this machine's byte order in memory, so HDF5 copies the codes.
    H5::FloatType disk(H5::PredType::IEEE_F32LE);
    if (kind == "bf16") {
      disk.setFields(15, 7, 8, 0, 7);
      disk.setPrecision(16);
      disk.setSize(2);
      disk.setEbias(127);
    } else {
      disk.setFields(15, 10, 5, 0, 10);
      disk.setPrecision(16);
      disk.setSize(2);
      disk.setEbias(15);
    }
    H5::FloatType mem;
    mem.copy(disk);
    mem.setOrder(H5::PredType::NATIVE_UINT16.getOrder());
    impl_->write(dataset, shape, codes, mem, disk);
  });
}

int H5File::stored_bits(const std::string& dataset) const {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(dataset,
                      [&] { return static_cast<int>(impl_->dataset(dataset).getDataType().getSize() * 8); });
}

void H5File::write_doubles(const std::string& dataset, const std::vector<std::size_t>& shape,
                           const double* data) {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(dataset, [&] {
    impl_->write(dataset, shape, data, H5::PredType::NATIVE_DOUBLE, H5::PredType::IEEE_F64LE);
  });
}

void H5File::write_ints(const std::string& dataset, const std::vector<std::size_t>& shape,
                        const std::int64_t* data) {
  std::lock_guard lock(h5_mutex());
  impl_->write(dataset, shape, data, H5::PredType::NATIVE_INT64, H5::PredType::STD_I64LE);
}

void H5File::write_bytes(const std::string& dataset, const std::vector<std::size_t>& shape,
                         const std::uint8_t* data) {
  std::lock_guard lock(h5_mutex());
  impl_->write(dataset, shape, data, H5::PredType::NATIVE_UINT8, H5::PredType::STD_U8LE);
}

void H5File::write_strings(const std::string& dataset, const std::vector<std::string>& values) {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(dataset, [&] {
    const auto parts = split_path(dataset);
    std::string parent;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) parent += "/" + parts[i];
    if (!parent.empty()) impl_->ensure_group(parent);
    impl_->unlink_dataset(dataset);
    std::vector<const char*> raw;
    raw.reserve(values.size());
    for (const auto& v : values) raw.push_back(v.c_str());
    H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
    type.setCset(H5T_CSET_UTF8);
    const hsize_t n = values.size();
    H5::DataSpace space(1, &n);
    H5::DataSet ds = impl_->file.createDataSet(dataset, type, space);
    if (!raw.empty()) ds.write(raw.data(), type);
  });
}

void H5File::ensure_group(const std::string& group) {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(group, [&] { impl_->ensure_group(group); });
}

void H5File::set_attr(const std::string& obj, const std::string& name, const std::string& value) {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(obj, [&] {
    std::unique_ptr<H5::Group> g;
    std::unique_ptr<H5::DataSet> d;
    H5::H5Object* o = impl_->object(obj, g, d);
    if (o->attrExists(name)) o->removeAttr(name);
    H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
    type.setCset(H5T_CSET_UTF8);
    H5::Attribute a = o->createAttribute(name, type, H5::DataSpace(H5S_SCALAR));
    a.write(type, value);
  });
}

void H5File::set_attr(const std::string& obj, const std::string& name, double value) {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(obj, [&] {
    std::unique_ptr<H5::Group> g;
    std::unique_ptr<H5::DataSet> d;
    H5::H5Object* o = impl_->object(obj, g, d);
    if (o->attrExists(name)) o->removeAttr(name);
    H5::Attribute a = o->createAttribute(name, H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR));
    a.write(H5::PredType::NATIVE_DOUBLE, &value);
  });
}

void H5File::set_attr(const std::string& obj, const std::string& name, std::int64_t value) {
  std::lock_guard lock(h5_mutex());
  return impl_->guard(obj, [&] {
    std::unique_ptr<H5::Group> g;
    std::unique_ptr<H5::DataSet> d;
    H5::H5Object* o = impl_->object(obj, g, d);
    if (o->attrExists(name)) o->removeAttr(name);
    H5::Attribute a = o->createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR));
    a.write(H5::PredType::NATIVE_INT64, &value);
  });
}

void h5_disable_free_lists() {
  const std::lock_guard<std::recursive_mutex> lock(h5_mutex());
  // Limits of 0 bytes on every kind of free list (regular, array, block; global and per list):
  // a freed block is released at once (HDF5 Reference Manual, H5set_free_list_limits).
  if (H5set_free_list_limits(0, 0, 0, 0, 0, 0) < 0 || H5garbage_collect() < 0)
    throw IoError("libhdf5: cannot set its free-list limits");
}

std::size_t h5_open_objects() {
  const std::lock_guard<std::recursive_mutex> lock(h5_mutex());
  // Not H5F_OBJ_DATATYPE: the C++ interface holds its predefined types (PredType) open for good.
  const ssize_t n =
      H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE | H5F_OBJ_DATASET | H5F_OBJ_GROUP | H5F_OBJ_ATTR);
  if (n < 0) throw IoError("libhdf5: cannot count its open objects");
  return static_cast<std::size_t>(n);
}

Tensor read_tensor(const std::string& spec) {
  if (const auto ref = parse_dataset_ref(spec)) return H5File::open(ref->file).read_floats(ref->dataset);
  if (spec.size() >= 4 && spec.compare(spec.size() - 4, 4, ".npy") == 0) {
    Tensor t;
    t.data = read_npy_floats(spec, t.shape);
    return t;
  }
  throw IoError(spec + ": expected FILE.npy or FILE.h5:/path/to/dataset");
}

void write_h5_atomic(const std::filesystem::path& file, const OutputPolicy& policy, bool keep_existing,
                     const std::function<void(H5File&)>& fill) {
  AtomicFile out(file, policy);
  std::error_code ec;
  {
    H5File f =
        H5File::open_in_memory(file, file, keep_existing && std::filesystem::is_regular_file(file, ec));
    fill(f);
    f.close_into(out.stream());
  }
  out.commit();
}

std::filesystem::path tensor_file(const std::string& spec) {
  if (const auto ref = parse_dataset_ref(spec)) return ref->file;
  return spec;
}

void write_tensor(const std::string& spec, const Tensor& t, const OutputPolicy& policy) {
  if (t.count() != t.data.size()) {
    throw ShapeError(spec + ": tensor shape holds " + std::to_string(t.count()) + " elements but data has " +
                     std::to_string(t.data.size()));
  }
  if (const auto ref = parse_dataset_ref(spec)) {
    for (const auto& in : policy.input_tensors) {
      const auto iref = parse_dataset_ref(in);
      std::error_code ec;
      if (iref && split_path(iref->dataset) == split_path(ref->dataset) &&
          (std::filesystem::equivalent(iref->file, ref->file, ec) ||
           std::filesystem::absolute(iref->file).lexically_normal() ==
               std::filesystem::absolute(ref->file).lexically_normal())) {
        throw IoError(spec + ": the output is the input dataset " + in +
                      "; choose another dataset (an input is never overwritten, even with --force)");
      }
    }
    // Adding a dataset to an existing file is normal: the file-level check allows it, the
    // dataset-level check below asks for --force.
    OutputPolicy file_policy = policy;
    file_policy.force = true;
    file_policy.inputs.clear();
    write_h5_atomic(ref->file, file_policy, true, [&](H5File& f) {
      if (f.exists(ref->dataset) && !policy.force)
        throw IoError(spec + ": dataset exists; pass --force to replace it");
      f.write_floats(ref->dataset, t.shape, t.data.data());
    });
    return;
  }
  if (spec.size() >= 4 && spec.compare(spec.size() - 4, 4, ".npy") == 0) {
    write_npy_floats(spec, t.shape, t.data.data(), policy);
    return;
  }
  throw IoError(spec + ": expected FILE.npy or FILE.h5:/path/to/dataset");
}

}  // namespace lpemu::io
