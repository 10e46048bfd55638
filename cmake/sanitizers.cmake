# The sanitizer flags, one list for both sanitized builds: MPC_SANITIZE (everything
# instrumented) and the tests' mpc_asan copy of the library (tests/CMakeLists.txt,
# docs/building.md "Sanitizers").
#
# GCC's -fsanitize=undefined leaves out float-cast-overflow (a float-to-int conversion
# out of the int's range, or of NaN: UB that x86 turns into INT_MIN silently), so it is
# named. -fno-sanitize-recover makes a UBSan finding abort the process like an ASan one
# does, so a finding fails its test instead of printing a line nobody reads.
set(MPC_SANITIZER_FLAGS
  -fsanitize=address,undefined,float-cast-overflow
  -fno-sanitize-recover=undefined,float-cast-overflow
  -fno-omit-frame-pointer)
set(MPC_SANITIZER_LINK_FLAGS -fsanitize=address,undefined,float-cast-overflow)

# The runtime options (ASAN_OPTIONS & co.) are compiled into each sanitized test binary,
# tests/asan/sanitizer_options.cc, so it behaves the same under ctest and run by hand.
set(MPC_SANITIZER_OPTIONS_SOURCE ${PROJECT_SOURCE_DIR}/tests/asan/sanitizer_options.cc)
