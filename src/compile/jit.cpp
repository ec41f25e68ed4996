// The JIT (jit.h): find the host compiler, key and check cache entries, compile a source into
// the cache, load a verified library. Linux (fork/exec, flock, dlopen, /proc/cpuinfo).
//
// What it does not do: generate code, decide which symbols to call, or evict old entries (the
// cache grows; deleting the folder is always safe).
#include "compile/jit.h"

#include "compile/file_lock.h"

#include "core/error.h"
#include "core/executable.h"
#include "core/isa.h"
#include "core/timer.h"
#include "io/atomic_file.h"
#include "io/file_bytes.h"
#include "kernels/cuda/autotune_cache.h"  // utc_now_iso8601

#include <dlfcn.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string_view>

namespace minigpt::compile {

namespace fs = std::filesystem;

namespace {

constexpr int kEntryFormat = 1;  // the .json's layout; bump to orphan every older entry

std::string getenv_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// A finished child process: its exit status (or -signal) and stdout + stderr together.
struct ProcessResult {
  int status = -1;
  std::string output;
  double cpu_s = 0;  // the child's user + system time (the compiler's own work, on a busy machine)
};

// Runs argv[0] (an absolute path) with argv in folder cwd, collecting its output through a
// pipe. Everything the child needs is prepared before fork(): between fork and exec it calls
// only async-signal-safe functions (the parent may have other threads).
ProcessResult run_process(const std::vector<std::string>& args, const fs::path& cwd) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string dir = cwd.string();
  int fds[2];
  MINIGPT_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "jit: pipe failed: {}", std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    MINIGPT_FAIL("jit: cannot start {}: fork failed: {}", args[0], std::strerror(err));
  }
  if (pid == 0) {  // child
    if (!dir.empty() && ::chdir(dir.c_str()) != 0) ::_exit(126);
    ::dup2(fds[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the copies
    ::dup2(fds[1], STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  ProcessResult result;
  std::array<char, 4096> buf;
  for (;;) {
    const ssize_t n = ::read(fds[0], buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    result.output.append(buf.data(), static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int wstatus = 0;
  struct rusage ru {};
  while (::wait4(pid, &wstatus, 0, &ru) < 0 && errno == EINTR) {
  }
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  result.cpu_s = seconds(ru.ru_utime) + seconds(ru.ru_stime);
  if (WIFEXITED(wstatus)) result.status = WEXITSTATUS(wstatus);
  else if (WIFSIGNALED(wstatus)) result.status = -WTERMSIG(wstatus);
  if (result.status == 127 && result.output.empty()) result.output = "exec failed";
  if (result.status == 126 && result.output.empty()) result.output = "cannot enter " + dir;
  return result;
}

HostCompiler find_host_compiler() {
  std::vector<std::string> names;
  std::string origin;
  if (std::string v = getenv_str("MINIGPT_CXX"); !v.empty()) {
    names = {v};
    origin = "$MINIGPT_CXX";
  } else if (std::string c = getenv_str("CXX"); !c.empty()) {
    names = {c};
    origin = "$CXX";
  } else {
    names = {"c++", "g++", "clang++"};
    origin = "PATH";
  }
  HostCompiler hc;
  for (const std::string& name : names) {
    if (auto p = find_executable(name)) {
      hc.path = p->string();
      break;
    }
  }
  MINIGPT_CHECK(!hc.path.empty(),
                "jit: no C++ compiler found (looked for {} from {}); install g++ or set MINIGPT_CXX",
                fmt::format("{}", fmt::join(names, ", ")), origin);
  const ProcessResult v = run_process({hc.path, "--version"}, {});
  MINIGPT_CHECK(v.status == 0, "jit: '{} --version' failed (status {}): {}", hc.path, v.status,
                v.output);
  hc.version = v.output.substr(0, v.output.find('\n'));
  hc.flags.assign(std::begin(kJitFlags), std::end(kJitFlags));
  for (std::string& f : isa_flags()) {
    // an ISA's -ffp-contract= takes the place of the default one (one rule in the flags)
    const std::string_view contract = "-ffp-contract=";
    const auto same = std::find_if(hc.flags.begin(), hc.flags.end(), [&](const std::string& g) {
      return f.starts_with(contract) && g.starts_with(contract);
    });
    if (same != hc.flags.end()) *same = std::move(f);
    else hc.flags.push_back(std::move(f));
  }
  return hc;
}

std::string read_cpu_features() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, vendor, family, model, name, flags;
  auto value = [](const std::string& l) {
    const size_t colon = l.find(':');
    if (colon == std::string::npos) return std::string();
    const size_t start = l.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : l.substr(start);
  };
  while (std::getline(in, line)) {
    auto is = [&](const char* key) { return line.rfind(key, 0) == 0; };
    if (is("vendor_id") && vendor.empty()) vendor = value(line);
    else if (is("cpu family") && family.empty()) family = value(line);
    else if (is("model name") && name.empty()) name = value(line);
    else if (is("model") && !is("model name") && model.empty()) model = value(line);
    else if (is("flags") && flags.empty()) flags = value(line);
    if (line.empty() && !flags.empty()) break;  // the first processor is enough
  }
  if (flags.empty()) return "unknown cpu";  // not Linux: key on the compiler alone
  return fmt::format("{} family {} model {} ({}): {}", vendor, family, model, name, flags);
}

std::string sha256_bytes(const void* data, size_t size) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  MINIGPT_CHECK(EVP_Digest(data, size, digest, &len, EVP_sha256(), nullptr) == 1,
                "jit: SHA-256 failed (libcrypto)");
  std::string hex;
  hex.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

std::vector<std::string> all_flags(const HostCompiler& hc, const JitRequest& request) {
  std::vector<std::string> flags = hc.flags;
  flags.insert(flags.end(), request.extra_flags.begin(), request.extra_flags.end());
  return flags;
}

// The paths of one entry.
struct Entry {
  fs::path so, json, cpp, lock;
  Entry(const fs::path& dir, const std::string& key)
      : so(dir / (key + ".so")), json(dir / (key + ".json")), cpp(dir / (key + ".cpp")),
        lock(dir / (key + ".lock")) {}
};

// Reads and checks an entry: check_cache_entry with the compiler's path, version and flags.
CheckedEntry check_entry(const Entry& e, const std::string& key, const HostCompiler& hc,
                         const std::vector<std::string>& flags) {
  return check_cache_entry(e.json, e.so, kEntryFormat, key, "so", [&](const nlohmann::json& j) -> std::string {
    if (j.at("compiler").value("path", "") != hc.path || j.at("compiler").value("version", "") != hc.version ||
        j.at("compiler").at("flags").get<std::vector<std::string>>() != flags)
      return ".json names another compiler or flags";
    return "";
  });
}

// dlopen's a private copy of verified bytes: a fresh unique name, so that the loader's cache
// by path cannot return another library, and a copy, so that nothing can change the file
// between the checksum and the load. Unlinked at once (the mapping outlives the name).
void* load_bytes(const fs::path& dir, const std::string& key, const std::vector<uint8_t>& so) {
  std::string pattern = (dir / ("." + key.substr(0, 16) + ".load.XXXXXX.so")).string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  const int fd = ::mkostemps(name.data(), 3, O_CLOEXEC);
  MINIGPT_CHECK(fd >= 0, "jit: cannot create a file to load from in {}: {}", dir.string(),
                std::strerror(errno));
  size_t done = 0;
  while (done < so.size()) {
    const ssize_t n = ::write(fd, so.data() + done, so.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(name.data());
      MINIGPT_FAIL("jit: writing {} failed: {}", name.data(), std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  void* handle = ::dlopen(name.data(), RTLD_NOW | RTLD_LOCAL);
  const char* err = handle ? nullptr : ::dlerror();
  const std::string why = err ? err : "";
  ::unlink(name.data());
  MINIGPT_CHECK(handle, "jit: dlopen of the library for key {} failed: {}", key, why);
  return handle;
}

// A private build folder in the cache folder (same filesystem: the .so is renamed out of it);
// removed with everything in it when destroyed.
class BuildDir {
 public:
  BuildDir(const fs::path& dir, const std::string& key) {
    std::string pattern = (dir / (".build-" + key.substr(0, 16) + "-XXXXXX")).string();
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    MINIGPT_CHECK(::mkdtemp(name.data()), "jit: cannot create a build folder in {}: {}",
                  dir.string(), std::strerror(errno));
    path_ = name.data();
  }
  ~BuildDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  BuildDir(const BuildDir&) = delete;
  BuildDir& operator=(const BuildDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  MINIGPT_CHECK(static_cast<bool>(out), "jit: cannot write {}", path.string());
}

// Compiles request.source in a private folder and publishes the entry. Returns the .so bytes
// and the compile time. Error with the compiler's diagnostics when the source does not compile.
std::vector<uint8_t> build_entry(const fs::path& dir, const Entry& e, const std::string& key,
                                 const JitRequest& request, const HostCompiler& hc,
                                 const std::vector<std::string>& flags, double& compile_s,
                                 double& compile_cpu_s) {
  const BuildDir build(dir, key);
  // Relative names and a fixed seed: the object holds no path or random name of this build, so
  // every process compiling this key gets the same bytes.
  const std::string src = key + ".cpp", out = key + ".so";
  write_text(build.path() / src, request.source);
  std::vector<std::string> args{hc.path};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("-frandom-seed=" + key);
  args.insert(args.end(), {src, "-o", out});
  const Timer timer;
  const ProcessResult r = run_process(args, build.path());
  compile_s = timer.elapsed_s();
  compile_cpu_s = r.cpu_s;
  if (r.status != 0) {
    // Kept for the reader of the error; never loaded (no .so, no .json).
    const fs::path failed = dir / (key + ".failed.cpp");
    io::write_file_atomic(failed.string(), request.source);
    MINIGPT_FAIL("jit: compiling '{}' failed (status {}); source kept in {}\n$ {}\n{}",
                 request.name, r.status, failed.string(), fmt::join(args, " "), r.output);
  }
  std::vector<uint8_t> so = io::read_file_bytes((build.path() / out).string());
  const std::string so_sha = sha256_bytes(so.data(), so.size());

  nlohmann::json j;
  j["format"] = kEntryFormat;
  j["key"] = key;
  j["name"] = request.name;
  j["key_extra"] = request.key_extra;
  j["compiler"] = {{"path", hc.path}, {"version", hc.version}, {"flags", flags}};
  j["command"] = fmt::format("{}", fmt::join(args, " "));
  j["cpu_features"] = cpu_features();
  j["so_bytes"] = so.size();
  j["so_sha256"] = so_sha;
  j["source_sha256"] = sha256_hex(request.source);
  j["compile_seconds"] = compile_s;
  j["compile_cpu_seconds"] = compile_cpu_s;
  j["created"] = cuda::utc_now_iso8601();
  if (!r.output.empty()) j["diagnostics"] = r.output;

  // The .so first, the .json last: an entry is only valid once its .json names the .so's
  // checksum, so a reader between the renames sees a miss (or the previous, equal, entry).
  MINIGPT_CHECK(::rename((build.path() / out).c_str(), e.so.c_str()) == 0,
                "jit: cannot move the library into the cache as {}: {}", e.so.string(),
                std::strerror(errno));
  io::write_file_atomic(e.cpp.string(), request.source);
  io::write_file_atomic(e.json.string(), j.dump(2) + "\n");
  return so;
}

// Removes what a process killed mid-compile or mid-load left in the folder: build folders and
// load copies (hidden names, see BuildDir and load_bytes) older than an hour, so never one that
// a live process is still using. Runs only on a miss (rare); errors are ignored.
void sweep_leftovers(const fs::path& dir) {
  std::error_code ec;
  const auto cutoff = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool leftover = name.rfind(".build-", 0) == 0 ||
                          (name[0] == '.' && name.find(".load.") != std::string::npos);
    std::error_code tec;
    if (leftover && fs::last_write_time(it->path(), tec) < cutoff && !tec) {
      std::error_code rec;
      fs::remove_all(it->path(), rec);
    }
  }
}

}  // namespace

std::string HostCompiler::describe() const {
  return fmt::format("{} [{}] {}", version, path, fmt::join(flags, " "));
}

std::vector<std::string> isa_flags() {
  switch (active_isa()) {
    case Isa::Avx512: return {};
    case Isa::Avx2: return {"-mno-avx512f", "-ffp-contract=off"};
    case Isa::Scalar: return {"-mno-avx", "-ffp-contract=off"};
  }
  return {};
}

const HostCompiler& host_compiler() {
  static const HostCompiler hc = find_host_compiler();
  return hc;
}

const std::string& cpu_features() {
  static const std::string features = read_cpu_features();
  return features;
}

std::string sha256_hex(std::string_view bytes) { return sha256_bytes(bytes.data(), bytes.size()); }

void KeyText::field(std::string_view name, std::string_view value) {
  text_ += fmt::format("{} {}\n", name, value.size());
  text_ += value;
  text_ += '\n';
}

CheckedEntry check_cache_entry(const fs::path& json, const fs::path& binary, int format, const std::string& key,
                               const std::string& field, const std::function<std::string(const nlohmann::json&)>& builder_problem) {
  CheckedEntry c;
  std::error_code ec;
  if (!fs::exists(json, ec)) {
    c.problem = "missing";
    return c;
  }
  const std::string ext = binary.extension().string();  // ".so", ".cubin"
  try {
    const std::vector<uint8_t> text = io::read_file_bytes(json.string());
    const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end());
    if (j.value("format", 0) != format) c.problem = "an older entry format";
    else if (j.value("key", "") != key) c.problem = ".json names another key";
    else c.problem = builder_problem(j);
    if (!c.problem.empty()) return c;
    c.bytes = io::read_file_bytes(binary.string());
    c.sha256 = sha256_bytes(c.bytes.data(), c.bytes.size());
    const uint64_t want = j.at(field + "_bytes").get<uint64_t>();
    if (c.bytes.size() != want)
      c.problem = fmt::format("{} is {} bytes, .json says {}", ext, c.bytes.size(), want);
    else if (c.sha256 != j.at(field + "_sha256").get<std::string>())
      c.problem = fmt::format("{} checksum does not match its .json", ext);
  } catch (const std::exception& ex) {
    c.problem = std::string("unreadable: ") + ex.what();
  }
  if (!c.problem.empty()) c.bytes.clear();
  return c;
}

fs::path default_cache_dir() {
  if (std::string d = getenv_str("MINIGPT_CACHE_DIR"); !d.empty()) return d;
  if (std::string xdg = getenv_str("XDG_CACHE_HOME"); !xdg.empty())
    return fs::path(xdg) / "minigpt" / "compile";
  if (std::string home = getenv_str("HOME"); !home.empty())
    return fs::path(home) / ".cache" / "minigpt" / "compile";
  return fs::temp_directory_path() / "minigpt-compile";
}

JitLibrary::~JitLibrary() {
  if (handle_) ::dlclose(handle_);
}

void* JitLibrary::symbol(const std::string& name) const {
  ::dlerror();
  void* p = ::dlsym(handle_, name.c_str());
  MINIGPT_CHECK(p, "jit: symbol '{}' not found in {} (key {})", name, path_.string(), key_);
  return p;
}

std::string jit_key(const JitRequest& request) {
  const HostCompiler& hc = host_compiler();
  KeyText key("minigpt jit key v1");
  key.field("source", request.source);
  key.field("key_extra", request.key_extra);
  key.field("compiler_path", hc.path);
  key.field("compiler_version", hc.version);
  for (const std::string& f : all_flags(hc, request)) key.field("flag", f);
  key.field("cpu", cpu_features());
  return key.sha256();
}

std::shared_ptr<JitLibrary> jit_load(const JitRequest& request) {
  const Timer total;
  const HostCompiler& hc = host_compiler();
  const std::vector<std::string> flags = all_flags(hc, request);
  const std::string key = jit_key(request);
  const fs::path dir = request.cache_dir.empty() ? default_cache_dir() : request.cache_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  MINIGPT_CHECK(fs::is_directory(dir), "jit: cannot create the cache folder {}: {}", dir.string(),
                ec.message());
  const Entry e(dir, key);

  std::shared_ptr<JitLibrary> lib(new JitLibrary());
  lib->key_ = key;
  lib->path_ = e.so;
  CheckedEntry c = check_entry(e, key, hc, flags);
  if (c.problem.empty()) {
    lib->cache_hit_ = true;
  } else {
    const FileLock lock(e.lock);
    c = check_entry(e, key, hc, flags);  // another process may have built it while we waited
    if (c.problem.empty()) {
      lib->cache_hit_ = true;
    } else {
      if (c.problem != "missing")
        fmt::print(stderr, "minigpt jit: cache entry {} for '{}' is bad ({}): rebuilding\n",
                   e.json.string(), request.name, c.problem);
      sweep_leftovers(dir);
      c.bytes = build_entry(dir, e, key, request, hc, flags, lib->compile_s_, lib->compile_cpu_s_);
      c.sha256 = sha256_bytes(c.bytes.data(), c.bytes.size());
    }
  }
  lib->so_sha256_ = c.sha256;
  lib->handle_ = load_bytes(dir, key, c.bytes);
  lib->load_s_ = total.elapsed_s() - lib->compile_s_;
  return lib;
}

}  // namespace minigpt::compile
