#!/bin/sh
# exe_wrapper of the asan and tsan test setups (test/sanitize/meson.build):
#   wrap.sh asan|tsan LIBASAN LIBPAGEDATTN_ASAN COMMAND...
# Any sanitizer report ends the test with a failure. A Python test (the python suite) gets the
# ASan runtime preloaded and the ASan build of the library (PAGEDATTN_LIBRARY); CPython's own
# allocations at exit are not leaks of ours, so leak detection is off there.
mode=$1 runtime=$2 library=$3
shift 3
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1
case "$mode:$(basename "$1")" in
asan:python*)
  export LD_PRELOAD=$runtime PAGEDATTN_LIBRARY=$library
  export ASAN_OPTIONS=abort_on_error=1:detect_leaks=0
  ;;
esac
exec "$@"
