#include "format/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "cera/error.h"

namespace cera {
namespace {

[[noreturn]] void throw_os_error(const std::string& path, const char* what, int err) {
  const ErrorCode code = (err == ENOENT || err == ENOTDIR) ? ErrorCode::NotFound : ErrorCode::Io;
  throw Error(code, path + ": " + what + ": " + std::strerror(err));
}

// Closes the descriptor on every path out of the constructor.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  FdGuard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) throw_os_error(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) throw_os_error(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode)) throw Error(ErrorCode::Io, path + ": not a regular file");
  size_ = size_t(st.st_size);
  if (size_ == 0) return;  // mmap of length 0 is an error; an empty file is just empty
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (p == MAP_FAILED) throw_os_error(path, "cannot mmap", errno);
  data_ = static_cast<const uint8_t*>(p);
  mapped_ = true;
}

MappedFile MappedFile::borrow(const void* data, size_t size, std::string name) {
  MappedFile m;
  m.path_ = std::move(name);
  m.data_ = static_cast<const uint8_t*>(data);
  m.size_ = size;
  return m;
}

void MappedFile::release() noexcept {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  mapped_ = false;
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, false)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, false);
  }
  return *this;
}

}  // namespace cera
