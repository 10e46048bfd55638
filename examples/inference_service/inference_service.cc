// A small long-running inference service on mpc's public API (mpc/mpc.h, mpc::Predictor):
// newline-delimited JSON requests in, logits out, computed on a thread pool that shares one
// Predictor.
//
//   inference_service serve MODEL [--socket PATH] [--threads N]
//       Requests on stdin (answers on stdout, in the order they finish), or on a Unix socket
//       (any number of connections; each gets the answers to its own requests).
//         request:  {"id": 7, "input": [784 floats]}   (any multiple of one example's values)
//         answer:   {"id": 7, "shape": [1,10], "logits": [10 floats]}
//                   {"id": 7, "error": "..."}          (and the service goes on)
//   inference_service check MODEL MPC_BIN WORK_DIR [--clients 8] [--requests 40] [--threads 8]
//       Self-check: runs `MPC_BIN run` on 16 inputs, then serves them on a socket to 8
//       concurrent clients (and once through the stdin loop), with malformed requests among
//       them; exits 0 only if every answer is bit for bit `mpc run`'s output and every
//       malformed request got an error answer.
//   inference_service bench MODEL [--clients 8] [--seconds 10] [--threads 8]
//       Closed-loop load from N clients over the socket; prints requests/s and latency
//       percentiles.
//
// Floats are written with 9 significant digits, which read back to the same float.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mpc/mpc.h"

namespace {

// ---- a fixed-size thread pool --------------------------------------------------------

class ThreadPool {
 public:
  explicit ThreadPool(int threads) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Loop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  void Submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    ready_.notify_one();
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopping, nothing left
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// ---- just enough JSON: one flat object per line ----------------------------------------

struct Request {
  std::string id = "null";  // the id's JSON text, echoed back as it came
  std::vector<float> input;
};

void SkipSpace(const std::string& s, size_t& i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
}

bool ParseString(const std::string& s, size_t& i, std::string* out) {
  if (i >= s.size() || s[i] != '"') return false;
  const size_t begin = i++;
  while (i < s.size() && s[i] != '"') i += s[i] == '\\' ? 2 : 1;
  if (i >= s.size()) return false;
  ++i;
  *out = s.substr(begin, i - begin);  // with its quotes, as JSON text
  return true;
}

bool ParseNumber(const std::string& s, size_t& i, std::string* text) {
  const size_t begin = i;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || std::strchr("+-.eE", s[i]) != nullptr)) {
    ++i;
  }
  if (i == begin) return false;
  *text = s.substr(begin, i - begin);
  return true;
}

// Parses {"id": <number|string>, "input": [numbers]} (other keys with number or string
// values are ignored); an error says what is wrong.
bool ParseRequest(const std::string& line, Request* request, std::string* error) {
  size_t i = 0;
  SkipSpace(line, i);
  if (i >= line.size() || line[i] != '{') return *error = "a request is a JSON object", false;
  ++i;
  bool have_input = false;
  while (true) {
    SkipSpace(line, i);
    if (i < line.size() && line[i] == '}') break;
    std::string key;
    if (!ParseString(line, i, &key)) return *error = "expected a quoted key", false;
    SkipSpace(line, i);
    if (i >= line.size() || line[i] != ':') return *error = "expected ':' after " + key, false;
    ++i;
    SkipSpace(line, i);
    if (key == "\"input\"") {
      if (i >= line.size() || line[i] != '[') return *error = "\"input\" must be an array of numbers", false;
      ++i;
      while (true) {
        SkipSpace(line, i);
        if (i < line.size() && line[i] == ']') {
          ++i;
          break;
        }
        std::string number;
        if (!ParseNumber(line, i, &number)) return *error = "\"input\" must be an array of numbers", false;
        char* end = nullptr;
        const float v = std::strtof(number.c_str(), &end);
        if (end != number.c_str() + number.size()) return *error = "bad number " + number, false;
        request->input.push_back(v);
        SkipSpace(line, i);
        if (i < line.size() && line[i] == ',') ++i;
      }
      have_input = true;
    } else {
      std::string value;
      if (!ParseString(line, i, &value) && !ParseNumber(line, i, &value)) {
        return *error = "the value of " + key + " must be a number or a string", false;
      }
      if (key == "\"id\"") request->id = value;
    }
    SkipSpace(line, i);
    if (i < line.size() && line[i] == ',') {
      ++i;
    } else if (i >= line.size() || line[i] != '}') {
      return *error = "expected ',' or '}'", false;
    }
  }
  if (!have_input) return *error = "the request has no \"input\"", false;
  return true;
}

std::string Escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

std::string FloatText(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// ---- the service: one request line -> one answer line -----------------------------------

class Service {
 public:
  explicit Service(const mpc::Predictor& predictor) : predictor_(predictor) {
    const mpc::TensorInfo& in = predictor.inputs()[0];
    input_name_ = in.name;
    for (size_t d = 1; d < in.shape.size(); ++d) {
      example_shape_.push_back(in.shape[d]);
      per_example_ *= in.shape[d];
    }
    output_name_ = predictor.outputs()[0].name;
  }

  // Thread-safe: the Predictor is, and nothing else here changes.
  std::string Answer(const std::string& line) const {
    Request request;
    std::string error;
    if (!ParseRequest(line, &request, &error)) return ErrorAnswer(request.id, "bad request: " + error);
    const int64_t n = static_cast<int64_t>(request.input.size());
    if (n == 0 || n % per_example_ != 0) {
      return ErrorAnswer(request.id, "\"input\" holds " + std::to_string(n) + " values; one example is " +
                                         std::to_string(per_example_) + " (any positive multiple is a batch)");
    }
    std::vector<int64_t> shape{n / per_example_};
    shape.insert(shape.end(), example_shape_.begin(), example_shape_.end());
    mpc::HostTensors inputs;
    inputs[input_name_] = mpc::HostTensor::Float32(shape, request.input);
    auto outputs = predictor_.Run(inputs);
    if (!outputs.ok()) return ErrorAnswer(request.id, std::string(outputs.status().message()));
    const mpc::HostTensor& logits = outputs->at(output_name_);
    std::string answer = "{\"id\": " + request.id + ", \"shape\": [";
    for (size_t d = 0; d < logits.shape.size(); ++d) answer += (d ? "," : "") + std::to_string(logits.shape[d]);
    answer += "], \"logits\": [";
    const float* values = reinterpret_cast<const float*>(logits.data.data());
    for (int64_t k = 0; k < logits.num_elements(); ++k) answer += (k ? "," : "") + FloatText(values[k]);
    return answer + "]}";
  }

  const std::string& input_name() const { return input_name_; }
  const std::vector<int64_t>& example_shape() const { return example_shape_; }
  int64_t per_example() const { return per_example_; }

 private:
  static std::string ErrorAnswer(const std::string& id, const std::string& message) {
    return "{\"id\": " + id + ", \"error\": \"" + Escaped(message) + "\"}";
  }
  const mpc::Predictor& predictor_;
  std::string input_name_, output_name_;
  std::vector<int64_t> example_shape_;
  int64_t per_example_ = 1;
};

// Reads request lines from `in` until its end, answering each on the pool; answers go to
// `out` (one line each, whole) as they finish. Returns once every answer is written.
void ServeStream(const Service& service, ThreadPool& pool, std::istream& in, std::ostream& out) {
  std::mutex mu;
  std::condition_variable done;
  int64_t pending = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    {
      std::lock_guard<std::mutex> lock(mu);
      ++pending;
    }
    pool.Submit([&service, &mu, &done, &pending, &out, line] {
      const std::string answer = service.Answer(line);
      std::lock_guard<std::mutex> lock(mu);
      out << answer << '\n';
      out.flush();
      if (--pending == 0) done.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  done.wait(lock, [&] { return pending == 0; });
}

// ---- the Unix socket: lines over a stream connection ----------------------------------

bool WriteAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Buffered line reader over a socket.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  bool Next(std::string* line) {
    while (true) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        *line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return true;
      }
      char chunk[65536];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  int fd_;
  std::string buffer_;
};

class SocketServer {
 public:
  SocketServer(const Service& service, ThreadPool& pool) : service_(service), pool_(pool) {}
  ~SocketServer() { Stop(); }

  bool Listen(const std::string& path, std::string* error) {
    sockaddr_un addr{};
    if (path.size() >= sizeof addr.sun_path) return *error = "socket path too long: " + path, false;
    ::unlink(path.c_str());
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 64) != 0) {
      return *error = path + ": " + std::strerror(errno), false;
    }
    path_ = path;
    acceptor_ = std::thread([this] { Accept(); });
    return true;
  }

  void Stop() {
    if (listen_fd_ < 0) return;
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    listen_fd_ = -1;
    if (acceptor_.joinable()) acceptor_.join();
    for (std::thread& t : connections_) t.join();
    ::unlink(path_.c_str());
  }

  void Wait() {
    if (acceptor_.joinable()) acceptor_.join();
  }

 private:
  void Accept() {
    while (!stopping_) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        if (errno == EINTR) continue;
        return;
      }
      connections_.emplace_back([this, fd] { Connection(fd); });
    }
  }

  // One connection: each request line goes to the pool; its answer is written whole.
  void Connection(int fd) {
    auto write_mu = std::make_shared<std::mutex>();
    auto pending = std::make_shared<std::pair<std::mutex, std::condition_variable>>();
    auto count = std::make_shared<int64_t>(0);
    LineReader reader(fd);
    std::string line;
    while (reader.Next(&line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      {
        std::lock_guard<std::mutex> lock(pending->first);
        ++*count;
      }
      pool_.Submit([this, fd, line, write_mu, pending, count] {
        const std::string answer = service_.Answer(line) + "\n";
        {
          std::lock_guard<std::mutex> lock(*write_mu);
          WriteAll(fd, answer);
        }
        std::lock_guard<std::mutex> lock(pending->first);
        if (--*count == 0) pending->second.notify_all();
      });
    }
    std::unique_lock<std::mutex> lock(pending->first);
    pending->second.wait(lock, [&] { return *count == 0; });
    ::close(fd);
  }

  const Service& service_;
  ThreadPool& pool_;
  int listen_fd_ = -1;
  std::string path_;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::vector<std::thread> connections_;  // touched by the acceptor only, joined after it
};

int Connect(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// ---- .npy, float32 only, for `mpc run`'s inputs and outputs ---------------------------

bool WriteNpy(const std::string& path, const std::vector<int64_t>& shape, const std::vector<float>& values) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(static_cast<char>(len & 0xff));
  out.put(static_cast<char>(len >> 8));
  out << header;
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  return static_cast<bool>(out);
}

bool ReadNpy(const std::string& path, std::vector<float>* values) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return false;
  size_t header_len = 0, offset = 0;
  if (bytes[6] == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
    offset = 10;
  } else {
    if (bytes.size() < 12) return false;
    for (int k = 0; k < 4; ++k) header_len |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + k])) << (8 * k);
    offset = 12;
  }
  if (offset + header_len > bytes.size() || bytes.substr(offset, header_len).find("'<f4'") == std::string::npos) {
    return false;
  }
  const size_t data = offset + header_len;
  values->resize((bytes.size() - data) / sizeof(float));
  std::memcpy(values->data(), bytes.data() + data, values->size() * sizeof(float));
  return true;
}

// ---- helpers of check and bench -------------------------------------------------------

std::string Option(int argc, char** argv, int first, const std::string& name, const std::string& fallback) {
  for (int i = first; i + 1 < argc; ++i) {
    if (name == argv[i]) return argv[i + 1];
  }
  return fallback;
}

std::vector<float> Example(int64_t values, int seed) {
  std::vector<float> x(static_cast<size_t>(values));
  uint32_t s = 2166136261u ^ static_cast<uint32_t>(seed * 16777619);
  for (float& v : x) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>((s >> 8) % 2001) / 1000.0f - 1.0f;  // [-1, 1]
  }
  return x;
}

std::string RequestLine(const std::string& id, const std::vector<float>& input) {
  std::string line = "{\"id\": " + id + ", \"input\": [";
  for (size_t k = 0; k < input.size(); ++k) line += (k ? "," : "") + FloatText(input[k]);
  return line + "]}";
}

// The logits of an answer line, or false when it has none (an error answer).
bool AnswerLogits(const std::string& answer, std::string* id, std::vector<float>* logits) {
  const size_t id_at = answer.find("\"id\": ");
  const size_t comma = answer.find(',', id_at);
  if (id_at == std::string::npos || comma == std::string::npos) return false;
  *id = answer.substr(id_at + 6, comma - id_at - 6);
  const size_t at = answer.find("\"logits\": [");
  if (at == std::string::npos) return false;
  logits->clear();
  const char* p = answer.c_str() + at + 11;
  while (*p && *p != ']') {
    char* end = nullptr;
    logits->push_back(std::strtof(p, &end));
    if (end == p) return false;
    p = *end == ',' ? end + 1 : end;
  }
  return true;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string SocketPathIn(const std::string& dir) {
  std::string path = dir + "/service.sock";
  if (path.size() >= sizeof(sockaddr_un{}.sun_path))
    path = "/tmp/mpc-inference-" + std::to_string(::getpid()) + ".sock";
  return path;
}

std::unique_ptr<mpc::Predictor> Load(const std::string& model, int threads) {
  mpc::PredictorOptions options;
  options.max_concurrent_runs = threads;
  auto predictor = mpc::Predictor::FromFile(model, options);
  if (!predictor.ok()) {
    std::fprintf(stderr, "inference_service: %s\n", std::string(predictor.status().message()).c_str());
    return nullptr;
  }
  const auto& inputs = (*predictor)->inputs();
  if (inputs.size() != 1 || inputs[0].dtype != mpc::HostDType::kFloat32 || (*predictor)->outputs().empty() ||
      (*predictor)->outputs()[0].dtype != mpc::HostDType::kFloat32) {
    std::fprintf(stderr, "inference_service: %s: this service takes models with one f32 input and an f32 output\n",
                 model.c_str());
    return nullptr;
  }
  for (const std::string& notice : (*predictor)->notices()) std::fprintf(stderr, "note: %s\n", notice.c_str());
  return *std::move(predictor);
}

// Compiles every worker for one-example requests before the clock starts.
bool Warm(const mpc::Predictor& predictor, const Service& service, int threads) {
  std::vector<int64_t> shape{1};
  shape.insert(shape.end(), service.example_shape().begin(), service.example_shape().end());
  mpc::HostTensors example;
  example[service.input_name()] = mpc::HostTensor::Float32(shape, Example(service.per_example(), 0));
  const absl::Status status = predictor.Warm(example, threads);
  if (!status.ok()) std::fprintf(stderr, "inference_service: warm-up: %s\n", std::string(status.message()).c_str());
  return status.ok();
}

// ---- the commands ----------------------------------------------------------------------

int Serve(int argc, char** argv) {
  const std::string model = argv[2];
  const int threads = std::atoi(Option(argc, argv, 3, "--threads", "8").c_str());
  const std::string socket_path = Option(argc, argv, 3, "--socket", "");
  auto predictor = Load(model, threads);
  if (!predictor) return 1;
  Service service(*predictor);
  ThreadPool pool(threads);
  if (socket_path.empty()) {
    std::fprintf(stderr, "inference_service: serving %s on stdin with %d threads\n", model.c_str(), threads);
    ServeStream(service, pool, std::cin, std::cout);
    return 0;
  }
  SocketServer server(service, pool);
  std::string error;
  if (!server.Listen(socket_path, &error)) return std::fprintf(stderr, "inference_service: %s\n", error.c_str()), 1;
  std::fprintf(stderr, "inference_service: serving %s on %s with %d threads\n", model.c_str(), socket_path.c_str(),
               threads);
  server.Wait();
  return 0;
}

int Check(int argc, char** argv) {
  if (argc < 5) return std::fprintf(stderr, "usage: %s check MODEL MPC_BIN WORK_DIR [options]\n", argv[0]), 2;
  const std::string model = argv[2], mpc_bin = argv[3], work = argv[4];
  const int clients = std::atoi(Option(argc, argv, 5, "--clients", "8").c_str());
  const int requests = std::atoi(Option(argc, argv, 5, "--requests", "40").c_str());
  const int threads = std::atoi(Option(argc, argv, 5, "--threads", "8").c_str());
  constexpr int kInputs = 16;
  std::filesystem::create_directories(work);
  auto predictor = Load(model, threads);
  if (!predictor) return 1;
  Service service(*predictor);

  // What `mpc run` answers for each input, one process per input.
  std::vector<std::vector<float>> inputs, expected;
  std::vector<int64_t> shape{1};
  shape.insert(shape.end(), service.example_shape().begin(), service.example_shape().end());
  for (int k = 0; k < kInputs; ++k) {
    inputs.push_back(Example(service.per_example(), k + 1));
    const std::string in = work + "/input-" + std::to_string(k) + ".npy";
    const std::string out = work + "/mpc-run-" + std::to_string(k);
    if (!WriteNpy(in, shape, inputs.back())) return std::fprintf(stderr, "check: cannot write %s\n", in.c_str()), 1;
    const std::string command = "'" + mpc_bin + "' run --model '" + model + "' --input '" + service.input_name() + "=" +
                                in + "' --output-dir '" + out + "' > '" + out + ".log' 2>&1";
    if (std::system(command.c_str()) != 0) {
      return std::fprintf(stderr, "check: FAILED: %s (see %s.log)\n", command.c_str(), out.c_str()), 1;
    }
    expected.emplace_back();
    if (!ReadNpy(out + "/logits.npy", &expected.back())) {
      return std::fprintf(stderr, "check: FAILED: cannot read %s/logits.npy\n", out.c_str()), 1;
    }
  }
  std::printf("check: `mpc run` answered %d inputs (%zu logits each)\n", kInputs, expected[0].size());

  ThreadPool pool(threads);
  if (!Warm(*predictor, service, threads)) return 1;

  // 1. The stdin loop, on a stream: every input once, plus two malformed requests.
  {
    std::stringstream in, out;
    for (int k = 0; k < kInputs; ++k) in << RequestLine(std::to_string(k), inputs[k]) << "\n";
    in << "{\"id\": 100, \"input\": [1, 2, 3]}\n{not json\n";
    ServeStream(service, pool, in, out);
    int right = 0, errors = 0;
    std::string line;
    while (std::getline(out, line)) {
      std::string id;
      std::vector<float> logits;
      if (AnswerLogits(line, &id, &logits)) {
        const int k = std::atoi(id.c_str());
        right += k >= 0 && k < kInputs && SameBits(logits, expected[k]);
      } else {
        errors += line.find("\"error\"") != std::string::npos;
      }
    }
    std::printf("check: stdin loop: %d/%d answers equal `mpc run`'s, %d/2 malformed requests answered with an error\n",
                right, kInputs, errors);
    if (right != kInputs || errors != 2) return std::fprintf(stderr, "check: FAILED (stdin loop)\n"), 1;
  }

  // 2. The socket, `clients` concurrent connections, each sending `requests` requests one
  // at a time (every seventh a malformed one) and checking each answer.
  SocketServer server(service, pool);
  std::string error;
  const std::string socket_path = SocketPathIn(work);
  if (!server.Listen(socket_path, &error)) return std::fprintf(stderr, "check: %s\n", error.c_str()), 1;
  std::atomic<int> right{0}, wrong{0}, errors_ok{0};
  std::vector<std::thread> threads_of_clients;
  for (int c = 0; c < clients; ++c) {
    threads_of_clients.emplace_back([&, c] {
      const int fd = Connect(socket_path);
      if (fd < 0) {
        wrong += requests;
        return;
      }
      LineReader reader(fd);
      for (int r = 0; r < requests; ++r) {
        const int k = (c * 5 + r * 3) % kInputs;
        const bool malformed = r % 7 == 6;
        const std::string id = "\"c" + std::to_string(c) + "-" + std::to_string(r) + "\"";
        std::string line = malformed ? "{\"id\": " + id + ", \"input\": [0.5, oops]}"
                                     : RequestLine(id, inputs[static_cast<size_t>(k)]);
        std::string answer, got_id;
        std::vector<float> logits;
        if (!WriteAll(fd, line + "\n") || !reader.Next(&answer)) {
          ++wrong;
          break;
        }
        if (malformed) {
          (answer.find("\"error\"") != std::string::npos && answer.find(id) != std::string::npos ? errors_ok : wrong)++;
        } else if (AnswerLogits(answer, &got_id, &logits) && got_id == id && SameBits(logits, expected[k])) {
          ++right;
        } else {
          ++wrong;
          std::fprintf(stderr, "check: client %d request %d: answer differs: %.200s\n", c, r, answer.c_str());
        }
      }
      ::close(fd);
    });
  }
  for (std::thread& t : threads_of_clients) t.join();
  server.Stop();
  const int malformed_sent = clients * (requests / 7);
  std::printf(
      "check: socket, %d concurrent clients x %d requests on %d threads (%d workers): %d answers bit-identical to "
      "`mpc run`, %d wrong, %d/%d malformed requests answered with an error\n",
      clients, requests, threads, predictor->workers(), right.load(), wrong.load(), errors_ok.load(), malformed_sent);
  if (wrong != 0 || right != clients * requests - malformed_sent || errors_ok != malformed_sent) {
    std::fprintf(stderr, "check: FAILED\n");
    return 1;
  }
  std::printf("inference_service check: OK\n");
  return 0;
}

int Bench(int argc, char** argv) {
  const std::string model = argv[2];
  const int clients = std::atoi(Option(argc, argv, 3, "--clients", "8").c_str());
  const double seconds = std::atof(Option(argc, argv, 3, "--seconds", "10").c_str());
  const int threads = std::atoi(Option(argc, argv, 3, "--threads", "8").c_str());
  auto predictor = Load(model, threads);
  if (!predictor) return 1;
  Service service(*predictor);
  ThreadPool pool(threads);
  if (!Warm(*predictor, service, threads)) return 1;
  SocketServer server(service, pool);
  std::string error;
  const std::string socket_path = SocketPathIn(std::filesystem::temp_directory_path().string());
  if (!server.Listen(socket_path, &error)) return std::fprintf(stderr, "bench: %s\n", error.c_str()), 1;
  std::vector<std::string> lines;
  for (int k = 0; k < 16; ++k) lines.push_back(RequestLine(std::to_string(k), Example(service.per_example(), k + 1)));
  using Clock = std::chrono::steady_clock;
  std::vector<std::vector<double>> latencies(static_cast<size_t>(clients));
  std::atomic<int> failures{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point stop = start + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
  std::vector<std::thread> client_threads;
  for (int c = 0; c < clients; ++c) {
    client_threads.emplace_back([&, c] {
      const int fd = Connect(socket_path);
      if (fd < 0) {
        ++failures;
        return;
      }
      LineReader reader(fd);
      std::string answer;
      for (int r = 0; Clock::now() < stop; ++r) {
        const Clock::time_point sent = Clock::now();
        if (!WriteAll(fd, lines[static_cast<size_t>((c + r) % 16)] + "\n") || !reader.Next(&answer) ||
            answer.find("\"logits\"") == std::string::npos) {
          ++failures;
          break;
        }
        latencies[static_cast<size_t>(c)].push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
      }
      ::close(fd);
    });
  }
  for (std::thread& t : client_threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  server.Stop();
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  if (all.empty() || failures != 0) return std::fprintf(stderr, "bench: FAILED (%d failures)\n", failures.load()), 1;
  auto pct = [&](double p) { return all[std::min(all.size() - 1, static_cast<size_t>(p / 100.0 * all.size()))]; };
  double sum = 0;
  for (double v : all) sum += v;
  std::printf("bench: %s, %d clients (closed loop, 1 example per request), %d threads, %d workers, %.1f s\n",
              model.c_str(), clients, threads, predictor->workers(), elapsed);
  std::printf("bench: %zu requests, %.1f requests/s; latency ms: mean %.3f p50 %.3f p90 %.3f p99 %.3f max %.3f\n",
              all.size(), all.size() / elapsed, sum / all.size(), pct(50), pct(90), pct(99), all.back());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 2 ? argv[1] : "";
  if (command == "serve") return Serve(argc, argv);
  if (command == "check") return Check(argc, argv);
  if (command == "bench") return Bench(argc, argv);
  std::fprintf(stderr,
               "usage: %s serve MODEL [--socket PATH] [--threads N]\n"
               "       %s check MODEL MPC_BIN WORK_DIR [--clients 8] [--requests 40] [--threads 8]\n"
               "       %s bench MODEL [--clients 8] [--seconds 10] [--threads 8]\n",
               argv[0], argv[0], argv[0]);
  return 2;
}
