# Sourced by scripts/test and scripts/compose-test: the flags of the one debug build both
# use. They must be the same in both, or the second build compiles everything again.
# -gline-tables-only: debug info enough for backtraces with file and line, and a build of
# about two thirds the time. (The editor index cannot go too: SwiftPM finds the tests
# through it.)
debug_build_flags=(-Xswiftc -gline-tables-only)

# The debug build of `syncline` with the Swift runtime linked in, for the compose image.
# A debug link keeps code nothing calls, which still names symbols of static Foundation's
# archives that the normal link order does not search again: the archives are searched as
# a group instead.
static_foundation_link=(--static-swift-stdlib -Xlinker --start-group)
for archive in FoundationNetworking _CFURLSessionInterface Foundation CoreFoundation _FoundationICU \
    FoundationEssentials FoundationInternationalization _FoundationCollections _FoundationCShims \
    swiftSynchronization swiftCore; do
  static_foundation_link+=(-Xlinker "-l$archive")
done
static_foundation_link+=(-Xlinker --end-group -Xlinker -lcurl)
