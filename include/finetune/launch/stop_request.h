// Note [Preemption]
// Slurm (scancel, the end of a time limit, --signal=USR1@N), Kubernetes and torchrun end a job
// with SIGTERM (or the SIGUSR1 a Slurm script asks for) and kill it a grace period later (Slurm's
// KillWait defaults to 30 s). finetune turns the first such signal into a request: the handler
// only records it, every rank learns at the next step boundary that some rank was asked to stop
// (the request rides on the step's token-count all-reduce, so no rank decides alone), and all of
// them save a resumable checkpoint of the steps completed and exit with kPreemptedExitCode. A
// second signal while that save is under way ends the process at once (the default action).
//
// A signal handler can only reach state that outlives every call, so the recorded signal number
// is the one process-wide variable of the program (it is written only by the handler, read only
// through StopRequest).
#pragma once

namespace finetune {

// The exit status of a run stopped by a signal after saving: 128 + SIGTERM, what the shell and
// Slurm report for a job ended by SIGTERM, so a requeue script sees the same status either way.
inline constexpr int kPreemptedExitCode = 143;

class StopRequest {
 public:
  // Installs the handlers for SIGTERM and SIGUSR1 (for the process's lifetime; installing again
  // is harmless). The first signal is recorded; the next one has the default action.
  static void install();

  // The signal received (SIGTERM or SIGUSR1), or 0 while none has come.
  static int signal_received();

  // The signal's name ("SIGTERM"), for the log line.
  static const char* signal_name(int signal_number);

  // Forgets a received signal and restores the recording handler (tests).
  static void reset_for_testing();
};

}  // namespace finetune
