// NumPy .npy files: reading (format 1.0/2.0/3.0), writing (1.0, or 2.0 when a header
// would not fit), and LoadNpy, which pairs a features array with a labels array.
// Format reference: numpy/lib/format.py. The header is a Python dict literal; we parse
// the subset numpy writes, tolerant of spacing and trailing commas, since hand-written
// and older-numpy files differ in exactly those details.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "engine/dataset.h"

namespace mpc {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              ".npy I/O copies little-endian data verbatim; a big-endian host needs byte swaps");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr char kSupported[] = "float32, float64, float16, int64, int32, uint8, bool";

absl::Status Bad(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// ---- Header dict parsing -------------------------------------------------------------

struct NpyHeader {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<Shape> shape;
};

// A cursor over the header text. Each Parse* consumes what it recognises and returns
// an error that quotes where parsing stopped.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, absl::string_view text) : path_(path), text_(text) {}

  absl::StatusOr<NpyHeader> Parse() {
    NpyHeader header;
    SkipSpace();
    MPC_RETURN_IF_ERROR(Expect('{'));
    while (true) {
      SkipSpace();
      if (Peek() == '}') break;
      MPC_ASSIGN_OR_RETURN(std::string key, ParseString());
      SkipSpace();
      MPC_RETURN_IF_ERROR(Expect(':'));
      SkipSpace();
      if (key == "descr") {
        if (Peek() == '[') {
          return Bad(path_,
                     "structured (record) dtypes are not supported; save a plain array "
                     "of one of: " +
                         std::string(kSupported));
        }
        MPC_ASSIGN_OR_RETURN(header.descr, ParseString());
      } else if (key == "fortran_order") {
        MPC_ASSIGN_OR_RETURN(header.fortran_order, ParseBool());
      } else if (key == "shape") {
        MPC_ASSIGN_OR_RETURN(header.shape, ParseShape());
      } else {
        return Error(absl::StrCat("unexpected header key '", key, "'; expected only descr, fortran_order, shape"));
      }
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;  // a trailing comma before '}' is fine: the loop top handles it
      }
      SkipSpace();
      if (Peek() != '}') return Error("expected ',' or '}'");
    }
    ++pos_;  // '}'
    // What follows the dict is padding: spaces and a final newline.
    SkipSpace();
    if (pos_ != text_.size() && text_[pos_] != '\0') return Error("unexpected text after '}'");
    return header;
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  absl::Status Error(absl::string_view what) const {
    const absl::string_view rest = text_.substr(std::min(pos_, text_.size()), 20);
    return Bad(path_, absl::StrCat("malformed header: ", what, " at offset ", pos_, " (near \"", rest, "\") in ",
                                   text_.substr(0, 120)));
  }
  absl::Status Expect(char c) {
    if (Peek() != c) return Error(absl::StrCat("expected '", std::string(1, c), "'"));
    ++pos_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ParseString() {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return Error("expected a quoted string");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == absl::string_view::npos) return Error("unterminated string");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return s;
  }
  absl::StatusOr<bool> ParseBool() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    return Error("expected True or False");
  }
  // "()", "(5,)", "(3, 4)", "(3, 4,)"; Python 2 era files may write "3L".
  absl::StatusOr<Shape> ParseShape() {
    MPC_RETURN_IF_ERROR(Expect('('));
    Shape shape;
    while (true) {
      SkipSpace();
      if (Peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(Peek()))) {
        return Error("expected a non-negative integer dimension");
      }
      int64_t dim = 0;
      while (std::isdigit(static_cast<unsigned char>(Peek()))) {
        const int digit = Peek() - '0';
        if (dim > (std::numeric_limits<int64_t>::max() - digit) / 10) {
          return Error("dimension too large");
        }
        dim = dim * 10 + digit;
        ++pos_;
      }
      if (Peek() == 'L') ++pos_;
      shape.push_back(dim);
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() != ')') return Error("expected ',' or ')' in shape");
    }
    ++pos_;  // ')'
    return shape;
  }

  const std::string& path_;
  absl::string_view text_;
  size_t pos_ = 0;
};

// ---- dtype descriptors ---------------------------------------------------------------

absl::StatusOr<DType> DTypeFromDescr(const std::string& path, const std::string& descr) {
  if (descr.size() < 3) {
    return Bad(path, absl::StrCat("unsupported dtype '", descr, "'; supported: ", kSupported));
  }
  const char order = descr[0];
  const std::string type = descr.substr(1);
  struct Entry {
    const char* type;
    DType dtype;
  };
  static constexpr Entry kTypes[] = {
      {"f4", DType::kF32}, {"f8", DType::kF64}, {"f2", DType::kF16},  {"i8", DType::kI64},
      {"i4", DType::kI32}, {"u1", DType::kU8},  {"b1", DType::kBool},
  };
  for (const Entry& e : kTypes) {
    if (type != e.type) continue;
    const bool one_byte = DTypeSize(e.dtype) == 1;
    // One-byte types have no byte order ('|'); numpy also accepts '<' / '=' for them.
    // '=' is native order, which is little-endian on every host we build for.
    if (order == '<' || order == '=' || (order == '|' && one_byte) || (order == '>' && one_byte)) {
      return e.dtype;
    }
    if (order == '>') {
      return Bad(path,
                 absl::StrCat("big-endian dtype '", descr, "' is not supported; save with arr.astype('<", type, "')"));
    }
    break;
  }
  return Bad(path, absl::StrCat("unsupported dtype '", descr, "'; supported: ", kSupported,
                                " (e.g. save arr.astype(np.float32) or arr.astype(np.int64))"));
}

absl::StatusOr<std::string> DescrFromDType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return std::string("<f4");
    case DType::kF64:
      return std::string("<f8");
    case DType::kF16:
      return std::string("<f2");
    case DType::kI64:
      return std::string("<i8");
    case DType::kI32:
      return std::string("<i4");
    case DType::kU8:
      return std::string("|u1");
    case DType::kBool:
      return std::string("|b1");
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("dtype ", std::string(DTypeName(dtype)),
                                                 " has no .npy equivalent; cast the tensor to f32 "
                                                 "first (supported: f32 f64 f16 i64 i32 u8 bool)"));
}

std::string ShapeToPython(const Shape& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

uint32_t ReadLittleEndian(const std::string& bytes, size_t offset, int width) {
  uint32_t v = 0;
  for (int i = width - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(bytes[offset + static_cast<size_t>(i)]);
  }
  return v;
}

absl::StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat(path, ": file not found"));
  }
  if (std::filesystem::is_directory(status)) {
    return Bad(path, "is a directory; expected a .npy file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return std::move(contents).str();
}

}  // namespace

absl::StatusOr<Tensor> ReadNpy(const std::string& path) {
  MPC_ASSIGN_OR_RETURN(std::string bytes, ReadFileBytes(path));
  return ParseNpy(bytes, path);
}

absl::StatusOr<Tensor> ParseNpy(const std::string& bytes, const std::string& path) {
  if (bytes.compare(0, kMagicLen, kMagic, kMagicLen) != 0) {
    return Bad(path, "not a .npy file (missing the \\x93NUMPY magic); write it with numpy.save");
  }
  if (bytes.size() < kMagicLen + 2) return Bad(path, "truncated: file ends inside the header");
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3) {
    return Bad(path, absl::StrFormat("unsupported .npy format version %d.%d; supported: 1.0, "
                                     "2.0, 3.0",
                                     major, minor));
  }
  // Version 1 has a 2-byte header length, versions 2 and 3 a 4-byte one.
  const int len_width = major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + static_cast<size_t>(len_width);
  if (bytes.size() < prefix) return Bad(path, "truncated: file ends inside the header");
  const size_t header_len = ReadLittleEndian(bytes, kMagicLen + 2, len_width);
  if (bytes.size() - prefix < header_len) {
    return Bad(path, absl::StrFormat("truncated: header length is %d bytes but only %d follow", header_len,
                                     bytes.size() - prefix));
  }
  const absl::string_view header_text(bytes.data() + prefix, header_len);
  MPC_ASSIGN_OR_RETURN(NpyHeader header, HeaderParser(path, header_text).Parse());
  if (!header.descr) return Bad(path, "header has no 'descr' (dtype) entry");
  if (!header.fortran_order) return Bad(path, "header has no 'fortran_order' entry");
  if (!header.shape) return Bad(path, "header has no 'shape' entry");
  MPC_ASSIGN_OR_RETURN(DType dtype, DTypeFromDescr(path, *header.descr));
  const Shape& shape = *header.shape;
  // Fortran order is only a different layout when two or more dimensions exceed 1.
  int nontrivial = 0;
  for (int64_t d : shape) nontrivial += d > 1;
  if (*header.fortran_order && nontrivial > 1) {
    return Bad(path,
               "array is in Fortran (column-major) order; save "
               "numpy.ascontiguousarray(arr) instead");
  }

  // Element count and byte size, checked so a corrupt shape cannot overflow.
  const size_t available = bytes.size() - prefix - header_len;
  const uint64_t item = DTypeSize(dtype);
  uint64_t count = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    const uint64_t ud = static_cast<uint64_t>(d);
    if (ud != 0 && count > std::numeric_limits<uint64_t>::max() / item / ud) overflow = true;
    count *= ud;
  }
  if (overflow || count * item > available) {
    return Bad(path, absl::StrFormat("truncated: header says shape %s of %s (%s bytes) but only "
                                     "%d bytes of data follow",
                                     ShapeToPython(shape), *header.descr,
                                     overflow ? "too many" : absl::StrCat(count * item), available));
  }
  if (count * item != available) {
    return Bad(path, absl::StrFormat("header says shape %s of %s (%d bytes) but %d bytes of data "
                                     "follow; the file is corrupt or not written by numpy.save",
                                     ShapeToPython(shape), *header.descr, count * item, available));
  }
  Tensor tensor(dtype, shape);
  if (count > 0) std::memcpy(tensor.raw(), bytes.data() + prefix + header_len, count * item);
  return tensor;
}

absl::Status WriteNpy(const std::string& path, const Tensor& tensor) {
  if (tensor.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot write an empty (unallocated) tensor"));
  }
  auto descr = DescrFromDType(tensor.dtype());
  if (!descr.ok()) return Bad(path, descr.status().message());
  for (int64_t d : tensor.shape()) {
    if (d < 0) return Bad(path, absl::StrCat("negative dimension in shape ", ShapeToString(tensor.shape())));
  }
  std::string dict =
      absl::StrCat("{'descr': '", *descr, "', 'fortran_order': False, 'shape': ", ShapeToPython(tensor.shape()), ", }");
  // Pad with spaces and a newline so the data starts 64-byte aligned, as numpy does.
  // Version 1.0 unless the header outgrows its 16-bit length (only for absurd ranks).
  int major = 1;
  size_t prefix = kMagicLen + 2 + 2;
  if (prefix + dict.size() + 1 > 65535) {
    major = 2;
    prefix = kMagicLen + 2 + 4;
  }
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string head(kMagic, kMagicLen);
  head.push_back(static_cast<char>(major));
  head.push_back(0);
  const uint32_t len = static_cast<uint32_t>(dict.size());
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) head.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  head += dict;

  // Write to a temporary file and rename it over the target, so a failed write never
  // leaves a half-written array where a good one (or nothing) was.
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create ", tmp, ": ", std::strerror(errno),
                                                    "; check that the directory exists and is writable"));
  }
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
  ok = ok && std::fwrite(tensor.raw(), 1, tensor.bytes(), f) == tensor.bytes();
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int saved_errno = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(ok ? errno : saved_errno);
    std::remove(tmp.c_str());
    return absl::DataLossError(absl::StrCat(path, ": write failed: ", reason));
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> LoadNpy(const std::string& features_path, const std::string& labels_path) {
  MPC_ASSIGN_OR_RETURN(Tensor features, ReadNpy(features_path));
  MPC_ASSIGN_OR_RETURN(Tensor labels, ReadNpy(labels_path));
  if (features.shape().empty()) {
    return Bad(features_path, "features must have at least one dimension [N, ...], got a 0-d array");
  }
  if (labels.shape().empty()) {
    return Bad(labels_path, "labels must have at least one dimension [N, ...], got a 0-d array");
  }
  if (features.shape()[0] != labels.shape()[0]) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has %d examples (shape %s) but %s has %d (shape %s); the first dimensions must agree",
                        features_path, features.shape()[0], ShapeToString(features.shape()), labels_path,
                        labels.shape()[0], ShapeToString(labels.shape())));
  }
  Dataset data;
  // Float features become f32; integer features (token ids for an embedding) stay
  // integers, as i64; the engine converts them when the model input is float.
  const DType feature_dtype = IsFloating(features.dtype()) ? DType::kF32 : DType::kI64;
  data.features = features.dtype() == feature_dtype ? std::move(features) : features.CastTo(feature_dtype);
  if (IsFloating(labels.dtype())) {
    // Float labels are regression targets.
    data.labels = labels.dtype() == DType::kF32 ? std::move(labels) : labels.CastTo(DType::kF32);
    return data;
  }
  // Integer (or bool) labels are class indices, never negative: one per example [N], or
  // one per position [N, T, ...] (a language model's next tokens).
  data.labels = labels.dtype() == DType::kI64 ? std::move(labels) : labels.CastTo(DType::kI64);
  const int64_t* l = data.labels.data<int64_t>();
  for (int64_t i = 0; i < data.labels.num_elements(); ++i) {
    if (l[i] < 0) {
      return Bad(labels_path, absl::StrFormat("label %d at index %d is negative; class indices "
                                              "must be in 0..num_classes-1",
                                              l[i], i));
    }
  }
  return data;
}

}  // namespace mpc
