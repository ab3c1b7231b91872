# Sourced by scripts/test and scripts/compose-test: the flags of the one debug build both
# use. They must be the same in both, or the second build compiles everything again.
# -gline-tables-only: debug info enough for backtraces with file and line. (The editor
# index cannot go too: SwiftPM finds the tests through it.)
debug_build_flags=(-Xswiftc -gline-tables-only)
