// The sanitizers' runtime options for mpc's sanitized test binaries (cmake/sanitizers.cmake),
// compiled in so that a binary behaves the same under ctest, run by hand or under a
// debugger. The runtimes call these hooks at start-up; ASAN_OPTIONS, UBSAN_OPTIONS and
// LSAN_OPTIONS in the environment still override them (e.g. ASAN_OPTIONS=detect_leaks=0).

extern "C" {

// abort_on_error: a report ends the test with SIGABRT, which ctest counts as a failure.
// Leaks are checked (LeakSanitizer, at exit) and fail the test the same way.
const char* __asan_default_options() {
  return "detect_leaks=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1";
}

// The sources are compiled with -fno-sanitize-recover, so a finding already aborts;
// halt_on_error says so again for anyone who rebuilds with recovery, and the stack says where.
const char* __ubsan_default_options() { return "halt_on_error=1:abort_on_error=1:print_stacktrace=1"; }

}  // extern "C"
