#!/bin/sh
# Build every libFuzzer harness in tests/fuzz (fuzz_*.c) with clang, ASan and UBSan, and run
# each for a bounded time. Used by CI (briefly) and by hand (longer):
#   FUZZ_SECONDS=600 tests/fuzz/run.sh            # every harness, 10 minutes each
#   FUZZ_SECONDS=60 tests/fuzz/run.sh fuzz_pdu    # only some
# Environment: FUZZ_SECONDS (default 16: eight harnesses and the build in about 3 minutes
# of CI), FUZZ_BUILD (default build-fuzz), FUZZ_CC (clang),
# FUZZ_ARGS (extra libFuzzer flags). Crashes are written to $FUZZ_BUILD/artifacts/ and make the
# script fail; reproduce with `$FUZZ_BUILD/fuzz_pdu $FUZZ_BUILD/artifacts/crash-...`.
# Corpus: each harness starts from tests/fuzz/corpus/<harness>/ (kept in the repository, so CI
# starts where earlier runs got to) plus fresh seeds (seeds.py); the checkout is only read, new
# finds go to $FUZZ_BUILD/corpus/<harness>/. `FUZZ_UPDATE_CORPUS=1 tests/fuzz/run.sh` (by hand,
# never in CI) then merges everything into a minimized tests/fuzz/corpus/<harness>/ to commit.
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${FUZZ_BUILD:-$ROOT/build-fuzz}
SECS=${FUZZ_SECONDS:-16}
CC=${FUZZ_CC:-clang}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"

UPDATE=${FUZZ_UPDATE_CORPUS:-0}
# The corpus in the checkout changes only on request, and never in CI: a CI run must leave
# the tree as it found it (scripts/test runs in the clone).
if [ "$UPDATE" = 1 ] && [ "${CI:-}" = true ]; then
    echo "fuzz: FUZZ_UPDATE_CORPUS=1 writes into the checkout; not in CI" >&2
    exit 1
fi
# Beyond these the corpus is no longer "small": the merge fails rather than bloat the repo.
CORPUS_MAX_FILES=300
CORPUS_MAX_KB=1024

command -v "$CC" >/dev/null 2>&1 || { echo "fuzz: $CC not found (apt-get install clang)" >&2; exit 1; }

# The engine's static libraries, built by Meson with clang and coverage instrumentation.
# Without the rbd store: the harnesses link no librbd, and no input reaches a cluster.
if [ ! -f "$BUILD/build.ninja" ]; then
    CC="$CC" meson setup "$BUILD" --buildtype=debugoptimized -Db_lundef=false -Dwerror=false \
        -Drbd=disabled -Dc_args="$SAN -fsanitize=fuzzer-no-link" >/dev/null
else
    meson configure "$BUILD" -Drbd=disabled >/dev/null
fi
LIBS="src/daemon/liblr_daemon.a src/iscsi/liblr_iscsi.a src/iscsi/liblr_iscsi_proto.a src/scsi/liblr_scsi.a \
src/bs/liblr_bs.a src/reactor/liblr_reactor.a src/util/liblr_util.a"
ninja -C "$BUILD" $LIBS >/dev/null

LINK=""
for l in $LIBS; do LINK="$LINK $BUILD/$l"; done

if [ $# -gt 0 ]; then
    NAMES="$*"
else
    NAMES=$(cd "$ROOT/tests/fuzz" && ls fuzz_*.c | sed 's/\.c$//')
fi

mkdir -p "$BUILD/artifacts"
# Scratch files of the harnesses (config copies, APTPL state, the in-process daemon's control
# socket) go here rather than into /tmp, and go with the next run.
rm -rf "$BUILD/tmp"
mkdir -p "$BUILD/tmp"
export TMPDIR="$BUILD/tmp"
# Seed corpora (valid PDU sequences, login texts, CHAP exchanges) generated fresh, used with
# the committed corpus and what earlier runs in this build dir found.
rm -rf "$BUILD/seeds"
python3 "$ROOT/tests/fuzz/seeds.py" "$BUILD/seeds"

# Merge with libFuzzer's -merge=1, on edge coverage (-use_counters=0: a merge on full features,
# edges times hit-count buckets, keeps several hundred inputs per harness; the counts are found
# again within seconds). First incrementally: the committed corpus is kept as it is and only the
# inputs (this build dir's finds, the seeds) that reach an edge it does not are added, so the
# commit shows just those (file names are content hashes). If that outgrows the size limits,
# everything is merged afresh into the smallest set covering all the edges.
merge_into() {
    new=$1 start=$2 kept=$3 seeds=$4
    rm -rf "$new"
    mkdir -p "$new"
    if [ -n "$start" ]; then
        find "$start" -type f -exec cp {} "$new"/ \;
        kept=""
    fi
    # shellcheck disable=SC2086
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "$BUILD/$name" -merge=1 -use_counters=0 -timeout=20 -rss_limit_mb=2048 \
        -max_len=65536 "$new" $kept "$BUILD/corpus/$name" $seeds >"$BUILD/$name-merge.log" 2>&1
}

corpus_fits() {
    files=$(find "$1" -type f | wc -l)
    kb=$(($(find "$1" -type f -exec cat {} + | wc -c) / 1024))
    [ "$files" -le $CORPUS_MAX_FILES ] && [ "$kb" -le $CORPUS_MAX_KB ]
}

update_corpus() {
    name=$1 kept=$2 seeds=$3
    dest="$ROOT/tests/fuzz/corpus/$name"
    new="$BUILD/corpus-merge/$name"
    for start in "$kept" ""; do
        if ! merge_into "$new" "$start" "$kept" "$seeds"; then
            echo "fuzz: $name: merge FAILED (log: $BUILD/$name-merge.log)" >&2
            return 1
        fi
        corpus_fits "$new" && break
    done
    if ! corpus_fits "$new"; then
        echo "fuzz: $name: merged corpus too big ($files files, $kb KiB; at most" \
            "$CORPUS_MAX_FILES and $CORPUS_MAX_KB KiB): $dest left alone" >&2
        return 1
    fi
    rm -rf "$dest"
    mkdir -p "$dest"
    find "$new" -type f -exec cp {} "$dest"/ \;
    echo "fuzz: $name: corpus $dest: $files files, $kb KiB"
}

status=0
for name in $NAMES; do
    src="$ROOT/tests/fuzz/$name.c"
    [ -f "$src" ] || { echo "fuzz: no $src" >&2; exit 1; }
    echo "fuzz: building $name"
    # shellcheck disable=SC2086
    "$CC" $SAN -fsanitize=fuzzer -O1 -D_GNU_SOURCE -std=gnu11 -Wall -Wextra -Werror \
        -Wno-missing-field-initializers -I"$ROOT/src" -I"$ROOT/include" \
        -o "$BUILD/$name" "$src" -Wl,--start-group $LINK -Wl,--end-group \
        -lisal -luring -lpthread -lcrypto -ljansson
    mkdir -p "$BUILD/corpus/$name"
    seeds="$BUILD/seeds/$name"
    [ -d "$seeds" ] || seeds=""
    kept="$ROOT/tests/fuzz/corpus/$name"
    [ -d "$kept" ] || kept=""
    echo "fuzz: running $name for ${SECS}s"
    # libFuzzer writes new inputs to the first directory only: the build dir's, never the
    # committed corpus after it
    rc=0
    # shellcheck disable=SC2086
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "$BUILD/$name" -max_total_time="$SECS" -timeout=20 -rss_limit_mb=2048 \
            -max_len=65536 -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$name-" \
            ${FUZZ_ARGS:-} "$BUILD/corpus/$name" $kept $seeds >"$BUILD/$name.log" 2>&1 || rc=$?
    # 77 is also libFuzzer's own exit status for a crash: a skip is 77 with the harness's line
    # saying so (fuzz_daemon.h: no network namespace to be had)
    if [ "$rc" = 77 ] && grep -q "^$name: skipped: " "$BUILD/$name.log"; then
        grep -m1 "^$name: skipped: " "$BUILD/$name.log" | sed 's/^/fuzz: /'
    elif [ "$rc" != 0 ]; then
        echo "fuzz: $name FAILED (log: $BUILD/$name.log)" >&2
        tail -n 60 "$BUILD/$name.log" >&2
        status=1
    else
        grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$BUILD/$name.log" |
            sed "s/^/fuzz: $name: /"
        if [ "$UPDATE" = 1 ] && ! update_corpus "$name" "$kept" "$seeds"; then
            status=1
        fi
    fi
done
exit $status
