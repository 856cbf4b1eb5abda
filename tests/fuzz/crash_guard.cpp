#include "crash_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace finetune::fuzz {
namespace {

CrashGuard* active_guard = nullptr;  // see crash_guard.h: the handler's only way in

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
constexpr size_t kAltStackSize = 1 << 16;

// Async-signal-safe output helpers.
void write_all(int fd, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd, bytes, size);
    if (written <= 0) return;
    bytes += written;
    size -= static_cast<size_t>(written);
  }
}
void append(char* out, size_t capacity, const char* text) {
  const size_t used = std::strlen(out);
  size_t i = 0;
  for (; text[i] != '\0' && used + i + 1 < capacity; ++i) out[used + i] = text[i];
  out[used + i] = '\0';
}
void append_number(char* out, size_t capacity, uint64_t value, unsigned base) {
  char digits[32];
  int n = 0;
  do {
    digits[n++] = "0123456789abcdef"[value % base];
    value /= base;
  } while (value != 0);
  char text[32];
  for (int i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
  text[n] = '\0';
  append(out, capacity, text);
}
void crash_path(char* out, size_t capacity, const char* prefix, const char* kind, const char* data, size_t size) {
  out[0] = '\0';
  append(out, capacity, prefix);
  append(out, capacity, kind);
  append(out, capacity, "-");
  append_number(out, capacity, input_hash(data, size), 16);
  append(out, capacity, ".bin");
}

}  // namespace

uint64_t input_hash(const char* data, size_t size) {
  uint64_t hash = 1469598103934665603ULL;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ static_cast<unsigned char>(data[i])) * 1099511628211ULL;
  return hash;
}

CrashGuard::CrashGuard(const std::string& crash_dir, const std::string& target, int stats_fd, const FuzzStats* stats)
    : stats_fd_(stats_fd), stats_(stats) {
  const std::string prefix = crash_dir + "/" + target + "-";
  if (prefix.size() + 64 >= sizeof(path_prefix_)) throw std::runtime_error("crash directory path too long");
  std::memcpy(path_prefix_, prefix.c_str(), prefix.size() + 1);
  alt_stack_ = std::malloc(kAltStackSize);
  stack_t stack{};
  stack.ss_sp = alt_stack_;
  stack.ss_size = kAltStackSize;
  ::sigaltstack(&stack, nullptr);
  struct sigaction action {};
  action.sa_handler = &CrashGuard::on_signal;
  action.sa_flags = SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (const int signal : kFatalSignals) ::sigaction(signal, &action, nullptr);
  ::sigaction(SIGALRM, &action, nullptr);
  ::sigaction(SIGPROF, &action, nullptr);
  active_guard = this;
}

CrashGuard::~CrashGuard() {
  end();
  active_guard = nullptr;
  for (const int signal : kFatalSignals) ::signal(signal, SIG_DFL);
  ::signal(SIGALRM, SIG_DFL);
  ::signal(SIGPROF, SIG_DFL);
  stack_t stack{};
  stack.ss_flags = SS_DISABLE;
  ::sigaltstack(&stack, nullptr);
  std::free(alt_stack_);
}

namespace {

itimerval one_shot(uint64_t ms) {
  itimerval timer{};
  timer.it_value.tv_sec = static_cast<time_t>(ms / 1000);
  timer.it_value.tv_usec = static_cast<suseconds_t>(ms % 1000) * 1000;
  return timer;
}

}  // namespace

// Note [Fuzz time limits]
// The limit is CPU time (ITIMER_PROF: the process's user + system time), so a loaded machine
// (other builds, a niced fuzz run) does not turn a slow-but-finite input into a "hang"; an input
// blocked without using CPU (a deadlock) is caught by a wall-clock backstop at kWallClockFactor
// times the limit.
constexpr uint64_t kWallClockFactor = 10;

void CrashGuard::begin(const std::string& input, unsigned timeout_ms) {
  input_ = input.data();
  input_size_ = input.size();
  const itimerval cpu = one_shot(timeout_ms);
  const itimerval wall = one_shot(static_cast<uint64_t>(timeout_ms) * kWallClockFactor);
  ::setitimer(ITIMER_PROF, &cpu, nullptr);
  ::setitimer(ITIMER_REAL, &wall, nullptr);
}

void CrashGuard::end() {
  const itimerval off{};
  ::setitimer(ITIMER_PROF, &off, nullptr);
  ::setitimer(ITIMER_REAL, &off, nullptr);
  input_ = nullptr;
  input_size_ = 0;
}

std::string CrashGuard::save(const std::string& input, const char* kind) const {
  char path[sizeof(path_prefix_) + 64];
  crash_path(path, sizeof(path), path_prefix_, kind, input.data(), input.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(input.data(), static_cast<std::streamsize>(input.size()));
  return out ? std::string(path) : std::string();
}

void CrashGuard::on_signal(int signal) {
  const CrashGuard* guard = active_guard;
  if (guard == nullptr) {
    ::signal(signal, SIG_DFL);
    ::raise(signal);
    return;
  }
  const bool hang = signal == SIGALRM || signal == SIGPROF;
  FuzzStats stats = *guard->stats_;
  (hang ? stats.hangs : stats.crashes) += 1;
  char path[sizeof(path_prefix_) + 64];
  crash_path(path, sizeof(path), guard->path_prefix_, hang ? "hang" : "crash", guard->input_, guard->input_size_);
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    write_all(fd, guard->input_, guard->input_size_);
    ::close(fd);
  }
  char message[sizeof(path) + 128] = "[fuzz] ";
  append(message, sizeof(message), hang ? "HANG (over the time limit)" : "CRASH (signal ");
  if (!hang) {
    append_number(message, sizeof(message), static_cast<uint64_t>(signal), 10);
    append(message, sizeof(message), ")");
  }
  append(message, sizeof(message), " on an input of ");
  append_number(message, sizeof(message), guard->input_size_, 10);
  append(message, sizeof(message), " bytes, saved to ");
  append(message, sizeof(message), path);
  append(message, sizeof(message), "\n");
  write_all(STDERR_FILENO, message, std::strlen(message));
  write_all(guard->stats_fd_, &stats, sizeof(stats));
  if (hang) ::_exit(3);
  ::signal(signal, SIG_DFL);  // die of the signal itself, so the parent sees which
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, signal);
  ::sigprocmask(SIG_UNBLOCK, &blocked, nullptr);
  ::raise(signal);
  ::_exit(4);
}

}  // namespace finetune::fuzz
