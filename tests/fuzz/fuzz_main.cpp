// finetune_fuzz: a self-contained mutation fuzzer for finetune's input parsers (fuzz_targets.h).
//
//   finetune_fuzz [--seconds S] [--inputs N] [--targets a,b] [--seed N] [--timeout_ms T]
//                 [--memory_mb M] [--max_size BYTES] [--crash_dir DIR] [--corpus DIR] [--junit FILE]
//   finetune_fuzz --list
//   finetune_fuzz --replay TARGET FILE...
//
// Each target runs in its own forked process (so its peak RSS is its own and a crash in one
// leaves the others running), under RLIMIT_AS = --memory_mb, so a huge allocation surfaces as
// std::bad_alloc (--memory_mb 0: no limit, for sanitizer builds). Inputs are run in-process one
// after another, each under a --timeout_ms CPU-time limit (a wall-clock backstop at 10x). An input passes when the parser accepts it or throws finetune::Error; any other exception is a
// failure (input saved, fuzzing goes on), a fatal signal or the alarm ends the target (input
// saved, see crash_guard.h). The corpus starts from the target's seeds (plus --corpus
// DIR/<target>/* files) and grows with accepted mutants. Exit status 0 only when no target had a
// failure, crash, hang, or a seed it did not accept.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include <cxxabi.h>

#include "crash_guard.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"
#include "fuzz_targets.h"
#include "mutator.h"

namespace finetune::fuzz {
namespace {

namespace fs = std::filesystem;

struct FuzzOptions {
  double seconds = 3;        // per target
  uint64_t max_inputs = 0;   // per target; 0 = until the time is up
  std::set<std::string> targets;
  uint64_t seed = 1;
  unsigned timeout_ms = 2000;
  uint64_t memory_mb = 4096;
  size_t max_size = 256 * 1024;
  size_t corpus_limit = 512;  // accepted mutants kept per target
  std::string crash_dir = "fuzz-crashes";
  std::string corpus_dir;
  std::string junit;  // a JUnit XML report, one test case per target (scripts/test.sh counts them)
  bool list = false;
  std::vector<std::string> replay;  // TARGET FILE...
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "finetune_fuzz: " << problem
            << "\nusage: finetune_fuzz [--seconds S] [--inputs N] [--targets a,b] [--seed N] [--timeout_ms T]"
               " [--memory_mb M] [--max_size BYTES] [--crash_dir DIR] [--corpus DIR] [--junit FILE] | --list"
               " | --replay TARGET FILE...\n";
  std::exit(2);
}

FuzzOptions parse_options(int argc, char** argv) {
  FuzzOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(flag + " needs a value");
      return argv[++i];
    };
    try {
      if (flag == "--seconds") options.seconds = std::stod(value());
      else if (flag == "--inputs") options.max_inputs = std::stoull(value());
      else if (flag == "--seed") options.seed = std::stoull(value());
      else if (flag == "--timeout_ms") options.timeout_ms = static_cast<unsigned>(std::stoul(value()));
      else if (flag == "--memory_mb") options.memory_mb = std::stoull(value());
      else if (flag == "--max_size") options.max_size = std::stoull(value());
      else if (flag == "--crash_dir") options.crash_dir = value();
      else if (flag == "--corpus") options.corpus_dir = value();
      else if (flag == "--junit") options.junit = value();
      else if (flag == "--list") options.list = true;
      else if (flag == "--targets") {
        std::stringstream names(value());
        for (std::string name; std::getline(names, name, ',');) options.targets.insert(name);
      } else if (flag == "--replay") {
        options.replay.assign(argv + i + 1, argv + argc);
        if (options.replay.size() < 2) usage("--replay needs a target and at least one file");
        break;
      } else {
        usage("unknown option " + flag);
      }
    } catch (const std::logic_error&) {
      usage("bad value for " + flag);
    }
  }
  return options;
}

const FuzzTarget& find_target(const std::string& name) {
  for (const FuzzTarget& target : fuzz_targets())
    if (name == target.name) return target;
  usage("no target named " + name + " (see --list)");
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::string type_name_of_current_exception() {
  const std::type_info* type = abi::__cxa_current_exception_type();
  if (type == nullptr) return "unknown";
  int status = 0;
  char* demangled = abi::__cxa_demangle(type->name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : type->name();
  std::free(demangled);
  return name;
}

enum class Outcome { Accepted, Rejected, Failed };

// Runs one input; on a failure `problem` says what was thrown.
Outcome run_one(const FuzzTarget& target, const std::string& input, const std::string& scratch, std::string& problem) {
  try {
    target.run(input, scratch);
    return Outcome::Accepted;
  } catch (const Error&) {
    return Outcome::Rejected;
  } catch (const std::exception& e) {
    problem = type_name_of_current_exception() + ": " + e.what();
  } catch (...) {
    problem = type_name_of_current_exception() + " (not a std::exception)";
  }
  return Outcome::Failed;
}

// Every input is written to a file here: in memory (/dev/shm) unless TMPDIR says otherwise, as
// rewriting a file on disk costs more than most parses.
std::string make_scratch_dir(const std::string& target) {
  const fs::path root = std::getenv("TMPDIR") == nullptr && fs::is_directory("/dev/shm") ? fs::path("/dev/shm")
                                                                                      : fs::temp_directory_path();
  std::string pattern = (root / ("finetune_fuzz_" + target + "_XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

// The body of a target's child process; returns its exit status.
int fuzz_target(const FuzzTarget& target, const FuzzOptions& options, int stats_fd) {
  if (options.memory_mb > 0) {
    const rlimit memory{options.memory_mb << 20, options.memory_mb << 20};
    if (::setrlimit(RLIMIT_AS, &memory) != 0) throw std::runtime_error("setrlimit(RLIMIT_AS) failed");
  }
  const std::string scratch = make_scratch_dir(target.name);
  FuzzStats stats;
  CrashGuard guard(options.crash_dir, target.name, stats_fd, &stats);
  std::string problem;
  size_t failures_reported = 0;
  auto record = [&](Outcome outcome, const std::string& input, bool is_seed) {
    ++stats.inputs;
    if (outcome == Outcome::Accepted) ++stats.accepted;
    if (outcome == Outcome::Rejected) ++stats.rejected;
    if (outcome == Outcome::Failed) ++stats.failures;
    if (outcome == Outcome::Failed && failures_reported++ < 20) {
      std::cerr << "[fuzz] " << target.name << ": FAILURE " << problem.substr(0, 400) << "; input saved to "
                << guard.save(input, "failure") << "\n";
    }
    if (is_seed && outcome != Outcome::Accepted) {
      ++stats.seed_failures;
      std::cerr << "[fuzz] " << target.name << ": seed " << guard.save(input, "seed") << " is not accepted\n";
    }
  };

  std::vector<std::string> corpus = target.seeds();
  const size_t seed_count = corpus.size();
  if (!options.corpus_dir.empty() && fs::is_directory(fs::path(options.corpus_dir) / target.name)) {
    for (const auto& entry : fs::directory_iterator(fs::path(options.corpus_dir) / target.name))
      if (entry.is_regular_file()) corpus.push_back(read_file(entry.path()));
  }
  for (size_t i = 0; i < corpus.size(); ++i) {
    guard.begin(corpus[i], options.timeout_ms);
    const Outcome outcome = run_one(target, corpus[i], scratch, problem);
    guard.end();
    record(outcome, corpus[i], i < seed_count);
  }

  Mutator mutator(options.seed * 1000003 + std::hash<std::string>{}(target.name), target.dictionary, options.max_size);
  const size_t base_corpus = corpus.size();
  size_t next_replaced = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  while ((options.max_inputs == 0 || stats.inputs < options.max_inputs) && elapsed() < options.seconds) {
    const std::string& base = corpus[mutator.below(corpus.size())];
    const std::string& other = corpus[mutator.below(corpus.size())];
    std::string input = mutator.mutate(base, other);
    guard.begin(input, options.timeout_ms);
    const Outcome outcome = run_one(target, input, scratch, problem);
    guard.end();
    record(outcome, input, false);
    if (outcome == Outcome::Accepted) {  // near-valid inputs reach deeper: mutate them further
      if (corpus.size() < base_corpus + options.corpus_limit) {
        corpus.push_back(std::move(input));
      } else {
        corpus[base_corpus + next_replaced++ % options.corpus_limit] = std::move(input);
      }
    }
  }
  fs::remove_all(scratch);
  const ssize_t written = ::write(stats_fd, &stats, sizeof(stats));
  (void)written;
  return stats.failures || stats.seed_failures ? 1 : 0;
}

struct TargetResult {
  std::string name;
  FuzzStats stats;
  double seconds = 0;
  long peak_rss_kb = 0;
  std::string status;  // ok | failures | crash (signal N) | hang
};

TargetResult run_target_process(const FuzzTarget& target, const FuzzOptions& options) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  const auto start = std::chrono::steady_clock::now();
  std::cout.flush();
  std::cerr.flush();
  const pid_t child = ::fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child == 0) {
    ::close(pipe_fds[0]);
    int status = 1;
    try {
      status = fuzz_target(target, options, pipe_fds[1]);
    } catch (const std::exception& e) {
      std::cerr << "[fuzz] " << target.name << ": harness error: " << e.what() << "\n";
    }
    std::cout.flush();
    std::cerr.flush();
    ::_exit(status);
  }
  ::close(pipe_fds[1]);
  TargetResult result;
  result.name = target.name;
  size_t got = 0;
  auto* bytes = reinterpret_cast<char*>(&result.stats);
  for (ssize_t n; got < sizeof(FuzzStats) && (n = ::read(pipe_fds[0], bytes + got, sizeof(FuzzStats) - got)) > 0;)
    got += static_cast<size_t>(n);
  ::close(pipe_fds[0]);
  int status = 0;
  rusage usage{};
  ::wait4(child, &status, 0, &usage);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.peak_rss_kb = usage.ru_maxrss;
  if (WIFSIGNALED(status)) {
    result.status = "crash (signal " + std::to_string(WTERMSIG(status)) + ")";
  } else if (WEXITSTATUS(status) == 3) {
    result.status = "hang";
  } else if (got != sizeof(FuzzStats) || WEXITSTATUS(status) != 0) {
    result.status = got != sizeof(FuzzStats) ? "died (exit " + std::to_string(WEXITSTATUS(status)) + ")" : "failures";
  } else {
    result.status = "ok";
  }
  return result;
}

void write_junit(const std::string& path, const std::vector<TargetResult>& results) {
  size_t failed = 0;
  for (const TargetResult& r : results) failed += r.status != "ok";
  std::ofstream out(path);
  out << "<?xml version=\"1.0\"?>\n<testsuites>\n<testsuite name=\"finetune_fuzz\" tests=\"" << results.size()
      << "\" failures=\"" << failed << "\" errors=\"0\" skipped=\"0\">\n";
  for (const TargetResult& r : results) {
    out << "  <testcase classname=\"finetune_fuzz\" name=\"" << r.name << "\" time=\"" << r.seconds << "\">";
    if (r.status != "ok") out << "<failure message=\"" << r.status << "\"/>";
    out << "</testcase>\n";
  }
  out << "</testsuite>\n</testsuites>\n";
}

int replay(const FuzzOptions& options) {
  const FuzzTarget& target = find_target(options.replay[0]);
  const std::string scratch = make_scratch_dir(target.name);
  int status = 0;
  for (size_t i = 1; i < options.replay.size(); ++i) {
    std::string problem;
    const std::string input = read_file(options.replay[i]);
    try {
      target.run(input, scratch);
      std::cout << options.replay[i] << ": accepted\n";
    } catch (const Error& e) {
      std::cout << options.replay[i] << ": rejected: " << e.what() << "\n";
    } catch (const std::exception& e) {
      std::cout << options.replay[i] << ": FAILURE " << type_name_of_current_exception() << ": " << e.what() << "\n";
      status = 1;
    }
  }
  fs::remove_all(scratch);
  return status;
}

int fuzz_main(int argc, char** argv) {
  const FuzzOptions options = parse_options(argc, argv);
  log::configure(0, 1, log::Level::Error);  // skipped-row warnings would drown the report
  if (options.list) {
    for (const FuzzTarget& target : fuzz_targets()) std::cout << target.name << "\t" << target.what << "\n";
    return 0;
  }
  if (!options.replay.empty()) return replay(options);
  for (const std::string& name : options.targets) find_target(name);
  fs::create_directories(options.crash_dir);

  std::vector<TargetResult> results;
  for (const FuzzTarget& target : fuzz_targets()) {
    if (!options.targets.empty() && !options.targets.count(target.name)) continue;
    results.push_back(run_target_process(target, options));
    const TargetResult& r = results.back();
    std::printf("[fuzz] %-20s %9llu inputs (%llu accepted, %llu rejected), %llu failures, %llu crashes, %llu hangs, "
                "peak RSS %.1f MiB, %.1f s: %s\n",
                r.name.c_str(), static_cast<unsigned long long>(r.stats.inputs),
                static_cast<unsigned long long>(r.stats.accepted), static_cast<unsigned long long>(r.stats.rejected),
                static_cast<unsigned long long>(r.stats.failures), static_cast<unsigned long long>(r.stats.crashes),
                static_cast<unsigned long long>(r.stats.hangs), r.peak_rss_kb / 1024.0, r.seconds, r.status.c_str());
    std::fflush(stdout);
  }
  bool ok = true;
  uint64_t total = 0;
  for (const TargetResult& r : results) {
    ok = ok && r.status == "ok";
    total += r.stats.inputs;
  }
  if (!options.junit.empty()) write_junit(options.junit, results);
  std::printf("[fuzz] %zu targets, %llu inputs, seed %llu, time limit %u ms per input, memory limit %llu MiB: %s\n",
              results.size(), static_cast<unsigned long long>(total), static_cast<unsigned long long>(options.seed),
              options.timeout_ms, static_cast<unsigned long long>(options.memory_mb),
              ok ? "no failures" : ("FAILURES (inputs in " + options.crash_dir + ")").c_str());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace finetune::fuzz

int main(int argc, char** argv) { return finetune::fuzz::fuzz_main(argc, argv); }
