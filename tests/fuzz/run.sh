#!/bin/sh
# Build every libFuzzer harness in tests/fuzz (fuzz_*.c) with clang, ASan and UBSan, and run
# each for a bounded time. Used by CI (briefly) and by hand (longer):
#   FUZZ_SECONDS=600 tests/fuzz/run.sh            # every harness, 10 minutes each
#   FUZZ_SECONDS=60 tests/fuzz/run.sh fuzz_pdu    # only some
# Environment: FUZZ_SECONDS (default 20), FUZZ_BUILD (default build-fuzz), FUZZ_CC (clang),
# FUZZ_ARGS (extra libFuzzer flags). Crashes are written to $FUZZ_BUILD/artifacts/ and make the
# script fail; reproduce with `$FUZZ_BUILD/fuzz_pdu $FUZZ_BUILD/artifacts/crash-...`.
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${FUZZ_BUILD:-$ROOT/build-fuzz}
SECS=${FUZZ_SECONDS:-20}
CC=${FUZZ_CC:-clang}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"

command -v "$CC" >/dev/null 2>&1 || { echo "fuzz: $CC not found (apt-get install clang)" >&2; exit 1; }

# The engine's static libraries, built by Meson with clang and coverage instrumentation.
if [ ! -f "$BUILD/build.ninja" ]; then
    CC="$CC" meson setup "$BUILD" --buildtype=debugoptimized -Db_lundef=false -Dwerror=false \
        -Dc_args="$SAN -fsanitize=fuzzer-no-link" >/dev/null
fi
LIBS="src/iscsi/liblr_iscsi.a src/iscsi/liblr_iscsi_proto.a src/scsi/liblr_scsi.a \
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
# Seed corpora (valid PDU sequences, login texts) generated fresh, merged with what earlier
# runs found.
python3 "$ROOT/tests/fuzz/seeds.py" "$BUILD/seeds"

status=0
for name in $NAMES; do
    src="$ROOT/tests/fuzz/$name.c"
    [ -f "$src" ] || { echo "fuzz: no $src" >&2; exit 1; }
    echo "fuzz: building $name"
    # shellcheck disable=SC2086
    "$CC" $SAN -fsanitize=fuzzer -O1 -D_GNU_SOURCE -std=gnu11 -Wall -Wextra -Werror \
        -Wno-missing-field-initializers -I"$ROOT/src" -I"$ROOT/include" \
        -o "$BUILD/$name" "$src" -Wl,--start-group $LINK -Wl,--end-group \
        -lisal -luring -lpthread -lcrypto
    mkdir -p "$BUILD/corpus/$name"
    seeds="$BUILD/seeds/$name"
    [ -d "$seeds" ] || seeds=""
    echo "fuzz: running $name for ${SECS}s"
    # shellcheck disable=SC2086
    if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "$BUILD/$name" -max_total_time="$SECS" -timeout=20 -rss_limit_mb=2048 \
            -max_len=65536 -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$name-" \
            ${FUZZ_ARGS:-} "$BUILD/corpus/$name" $seeds >"$BUILD/$name.log" 2>&1; then
        echo "fuzz: $name FAILED (log: $BUILD/$name.log)" >&2
        tail -n 60 "$BUILD/$name.log" >&2
        status=1
    else
        grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$BUILD/$name.log" |
            sed "s/^/fuzz: $name: /"
    fi
done
exit $status
