#!/usr/bin/env bash
# Power cuts under a running Tributary, many of them (issue #39): the integration test
# tests/it/store_powercut.rs with CUTS cuts instead of the suite's 20, then
# tests/it/store_powercut_import.rs with IMPORT_CUTS cuts of a store import (default 50). Tributary's data
# directory is on the power-cut file system of tests/it/support/powercut/ (FUSE), which keeps
# only what was fsynced; at seeded random moments Tributary is SIGKILLed, the power is cut,
# `tributary verify` runs on what is left and Tributary restarts on it, while an
# observer checks that nothing it was served is taken back (see the test's module docs).
#
# Usage: scripts/powercut.sh [CUTS]    (default 200; about 2.5 s a cut on two cores, plus the build)
# env:   TRIBUTARY_POWERCUT_SEED       replay a run: the test prints its seed first
#        TRIBUTARY_POWERCUT_METADATA   strict (default: POSIX) or journaled (any sync makes every
#                                      directory entry durable, as ext4 and XFS do in practice)
#        TRIBUTARY_POWERCUT_TEAR       never, always, or N: one dirty file in N (default 3) keeps
#                                      a torn prefix of its last unsynced write at a cut
# Needs: /dev/fuse and fusermount3 (Debian's fuse3, which .ci/setup installs), root or the
# right to mount FUSE. Prints one line per cut; exit 0 when no cut lost anything, else the
# test's failure message, and the complete report is in target/tmp/store_powercut-SEED.txt.
set -euo pipefail

CUTS=${1:-200}
[[ $CUTS =~ ^[0-9]+$ && $CUTS -ge 1 ]] || { echo "usage: $0 [CUTS] (a number of cuts, at least 1)" >&2; exit 2; }
cd "$(dirname "$0")/.."
[[ -e /dev/fuse ]] || { echo "/dev/fuse is missing: no FUSE in this kernel or container" >&2; exit 2; }
command -v fusermount3 >/dev/null || { echo "fusermount3 is missing: apt-get install -y fuse3" >&2; exit 2; }

# CI=true: a missing FUSE fails the run instead of skipping the test and reporting success.
TRIBUTARY_POWERCUT_CUTS=$CUTS CI=true cargo test --profile test-opt --test it -- \
    store_powercut::power_cuts_never_take_back_what_tributary_served --exact --nocapture 2>&1
TRIBUTARY_POWERCUT_IMPORT_CUTS=${IMPORT_CUTS:-50} CI=true exec cargo test --profile test-opt --test it -- \
    store_powercut_import:: --nocapture 2>&1
